"""The policy-value network: a small AlphaZero-style ResNet (plain nn.Module).

Input ``x``: ``[B, P, H, W]`` planes from the side to move (P = 4 for most games; see
:mod:`zeroloop.engine.games.base`). Output: policy logits ``[B, A]`` and value
``[B]`` in (-1, 1) from the side to move (and, for training, the final board
where the net has that head).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from zeroloop.engine.config import Annotated, at, check_fields
from zeroloop.engine.games.base import NUM_PLANES, Game, input_planes


@dataclass(frozen=True, kw_only=True)
class NetConfig:
    """Network shape (params.yaml ``net``).

    blocks: residual blocks of two 3x3 convolutions (AlphaZero: 19-20).
    channels: filters per convolution (AlphaZero: 256; a 6x7 board learns
        well with far less).
    value_hidden: units of the value head's hidden layer (AlphaZero: 256).
    ownership: a head trained to predict the final board of the position's
        game, cell by cell from the side to move (+1 its stone at the end, -1
        the opponent's, 0 empty; KataGo's ownership target, which for games
        whose stones stay is where the game's threats ended up): a dense
        target beside the one number of the result; training only: searching
        never runs it (the inference net drops it). Its loss weight is
        ``train.ownership_weight``.
    """

    blocks: Annotated[int, at.Interval(ge=1, le=40)] = 5
    channels: Annotated[int, at.Interval(ge=4, le=512)] = 64
    value_hidden: Annotated[int, at.Interval(ge=1, le=1024)] = 64
    ownership: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "net")

    def to_dict(self) -> dict:
        """The fields, for a model file's header; ``ownership`` only when set,
        so a net without that head is stored byte for byte as before the option."""
        d = asdict(self)
        if not d["ownership"]:
            del d["ownership"]
        return d


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class PolicyValueNet(nn.Module):
    """Stem conv -> ``blocks`` residual blocks -> policy and value heads."""

    def __init__(self, rows: int, cols: int, num_actions: int, config: NetConfig, planes: int = NUM_PLANES
                 ) -> None:
        super().__init__()
        self.rows, self.cols, self.num_actions, self.config = rows, cols, num_actions, config
        self.planes = planes
        c = config.channels
        self.stem = nn.Sequential(
            nn.Conv2d(planes, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.trunk = nn.Sequential(*[ResidualBlock(c) for _ in range(config.blocks)])
        self.policy_conv = nn.Sequential(nn.Conv2d(c, 2, 1, bias=False), nn.BatchNorm2d(2), nn.ReLU())
        self.policy_fc = nn.Linear(2 * rows * cols, num_actions)
        self.value_conv = nn.Sequential(nn.Conv2d(c, 1, 1, bias=False), nn.BatchNorm2d(1), nn.ReLU())
        self.value_fc = nn.Sequential(
            nn.Linear(rows * cols, config.value_hidden), nn.ReLU(), nn.Linear(config.value_hidden, 1))
        if config.ownership:  # made last: the other heads' initial weights stay as without it
            self.ownership_conv = nn.Conv2d(c, 1, 1)

    @classmethod
    def for_game(cls, game: Game, config: NetConfig) -> PolicyValueNet:
        return cls(game.rows, game.cols, game.num_actions, config, input_planes(game))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._heads(self.trunk(self.stem(x)))

    def _heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.policy_fc(self.policy_conv(h).flatten(1))  # [B, A]
        value = torch.tanh(self.value_fc(self.value_conv(h).flatten(1))).squeeze(1)  # [B]
        return logits, value

    @property
    def has_ownership_head(self) -> bool:
        return hasattr(self, "ownership_conv")

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Policy logits, value and the training-only heads the net has:
        ``ownership``, the logits
        ``[B, H, W]`` of the final board, ``tanh`` of them the expected owner
        of each cell from the side to move (:attr:`NetConfig.ownership`)."""
        h = self.trunk(self.stem(x))
        logits, value = self._heads(h)
        aux = {}
        if self.has_ownership_head:
            aux["ownership"] = self.ownership_conv(h).squeeze(1)
        return logits, value, aux
