"""The policy-value networks (plain nn.Modules), one class per ``net.kind``:
:class:`ResNet` (AlphaZero's residual tower, the default), :class:`GlobalPoolResNet`
(the same tower with KataGo's global-pooling bias) and :class:`MLPNet`
(fully connected layers over the flattened planes).

Input ``x``: ``[B, P, H, W]`` planes from the side to move (P = 4 for most games; see
:mod:`zeroloop.engine.games.base`). Output: policy logits ``[B, A]`` and value
``[B]`` in (-1, 1) from the side to move.

Every kind has a ``stem`` and a ``trunk`` (the int8 inference quantises exactly
those: :mod:`zeroloop.engine.nn.int8`) and heads after them, and folds its
BatchNorms into the layers before them for inference (:meth:`PolicyValueNet.fold_batchnorm`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar, Literal

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

from zeroloop.engine.config import Annotated, at, check_fields
from zeroloop.engine.games.base import NUM_PLANES, Game, input_planes

#: the shape keys each kind reads; the others must keep their defaults
_TOWER = ("blocks", "channels", "policy_channels", "value_channels")
_SHAPE_KEYS = {"resnet": _TOWER, "gpool": _TOWER, "mlp": ("hidden", "layers")}
#: the convolutional heads' widths a model file leaves out (AlphaZero's: files made before the keys)
_ALPHAZERO_HEADS = {"policy_channels": 2, "value_channels": 1}


def unused_keys(kind: str) -> list[str]:
    """The shape keys of the other kinds (which a net of ``kind`` refuses unless they keep their
    defaults)."""
    return [k for k in dict.fromkeys(k for keys in _SHAPE_KEYS.values() for k in keys)
            if k not in _SHAPE_KEYS[kind]]


@dataclass(frozen=True, kw_only=True)
class NetConfig:
    """Network shape (params.yaml ``net``).

    kind: the network family. ``resnet``: AlphaZero's tower of residual
        blocks (``blocks`` x ``channels``). ``gpool``: the same tower where every
        second block (the only one of a one-block net) adds KataGo's
        global-pooling bias: the mean and the max over the board of a quarter
        as many more channels bias each channel of the block (Wu 2019), so a
        small net sees the whole board in one block. ``mlp``: fully connected
        layers over the flattened input planes (``layers`` x ``hidden``; AlphaGPU
        reports a ~500k-weight MLP on par with AlphaZero.jl's Connect Four
        curve). Keys that do not shape the kind must keep their defaults.
    blocks: resnet and gpool: residual blocks of two 3x3 convolutions
        (AlphaZero: 19-20).
    channels: resnet and gpool: filters per convolution (AlphaZero: 256; a
        6x7 board learns well with far less).
    hidden: mlp only: units of each hidden layer (512: 0.65M weights on Connect
        Four).
    layers: mlp only: hidden layers, each a linear map, BatchNorm and ReLU; the
        first reads the planes, each further one is residual (x + layer(x)).
    policy_channels: resnet and gpool: the policy head's 1x1 convolution's
        filters, read by a linear map to the moves (AlphaZero: 2; AlphaZero.jl's
        Connect Four: 4).
    value_channels: resnet and gpool: the value head's 1x1 convolution's
        filters, read by its hidden layer (AlphaZero: 1; AlphaZero.jl's Connect
        Four: 32).
    value_hidden: units of the value head's hidden layer (AlphaZero: 256).
    """

    kind: Literal["resnet", "gpool", "mlp"] = "resnet"
    blocks: Annotated[int, at.Interval(ge=1, le=40)] = 5
    channels: Annotated[int, at.Interval(ge=4, le=512)] = 64
    hidden: Annotated[int, at.Interval(ge=4, le=4096)] = 512
    layers: Annotated[int, at.Interval(ge=1, le=40)] = 3
    policy_channels: Annotated[int, at.Interval(ge=1, le=256)] = 2
    value_channels: Annotated[int, at.Interval(ge=1, le=256)] = 1
    value_hidden: Annotated[int, at.Interval(ge=1, le=1024)] = 64

    def __post_init__(self) -> None:
        check_fields(self, "net")
        defaults = {f.name: f.default for f in fields(self)}
        shape = _SHAPE_KEYS[self.kind]
        unused = [f"net.{k}={getattr(self, k)}" for k in unused_keys(self.kind)
                  if getattr(self, k) != defaults[k]]
        if unused:
            one = len(unused) == 1
            keys = [f"net.{k}" for k in shape]
            raise ValueError(f"{', '.join(unused)} {'does' if one else 'do'} not apply to net.kind "
                             f"{self.kind!r}, shaped by {', '.join(keys[:-1])} and {keys[-1]}; "
                             f"leave {'it' if one else 'them'} out")

    def to_dict(self) -> dict:
        """The fields that shape the net, for a model file's header: ``kind``
        unless it is ``resnet`` (a file without one is a resnet), the shape
        keys of that kind only, the heads' widths only when they are not
        AlphaZero's; so a resnet is stored byte for byte as before the kinds."""
        d = asdict(self)
        for k in unused_keys(self.kind):
            del d[k]
        for k, v in _ALPHAZERO_HEADS.items():
            if d.get(k) == v:
                del d[k]
        if self.kind == "resnet":
            del d["kind"]
        return d

    @property
    def shape(self) -> str:
        """The shape in a few characters: ``5x64`` (resnet), ``gpool 3x32``, ``mlp 3x512``; a
        tower's heads after a slash when they are not AlphaZero's (``gpool 3x48/4x32``: policy and
        value channels)."""
        if self.kind == "mlp":
            return f"mlp {self.layers}x{self.hidden}"
        tower = f"{self.blocks}x{self.channels}"
        if (self.policy_channels, self.value_channels) != tuple(_ALPHAZERO_HEADS.values()):
            tower += f"/{self.policy_channels}x{self.value_channels}"
        return tower if self.kind == "resnet" else f"{self.kind} {tower}"


class PolicyValueNet(nn.Module):
    """What every kind of net has: a ``stem`` and a ``trunk`` that turn the
    planes into features, and heads that turn features into policy logits,
    value. :meth:`for_game` builds the kind that ``config.kind`` names."""

    #: whether the net computes on the board's cells with convolutions (training runs those channels-last)
    convolutional: ClassVar[bool] = True

    def __init__(self, rows: int, cols: int, num_actions: int, config: NetConfig, planes: int = NUM_PLANES
                 ) -> None:
        if type(self) is PolicyValueNet:
            raise TypeError("PolicyValueNet is what every kind of net has: build one with "
                            "PolicyValueNet.for_game(game, config), which makes the kind config.kind names")
        super().__init__()
        self.rows, self.cols, self.num_actions, self.config = rows, cols, num_actions, config
        self.planes = planes

    @classmethod
    def for_game(cls, game: Game, config: NetConfig) -> PolicyValueNet:
        """The ``config.kind`` net for ``game``'s board, moves and input planes."""
        return NETS[config.kind](game.rows, game.cols, game.num_actions, config, input_planes(game))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._heads(self.trunk(self.stem(x)))

    def _heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features -> policy logits ``[B, A]`` and value ``[B]``."""
        raise NotImplementedError

    def fold_batchnorm(self) -> None:
        """In place, on a net in eval mode: every BatchNorm folded into the
        layer before it (and replaced by an identity); the same answers."""
        raise NotImplementedError


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

    def fold_batchnorm(self) -> None:
        self.conv1, self.bn1 = fuse_conv_bn_eval(self.conv1, self.bn1), nn.Identity()
        self.conv2, self.bn2 = fuse_conv_bn_eval(self.conv2, self.bn2), nn.Identity()


class GlobalPoolingBlock(ResidualBlock):
    """A residual block whose first convolution's output is biased channel by
    channel by a linear map of the mean and the max over the board of
    ``pooled`` more channels (KataGo's global pooling, Wu 2019): whole-board
    facts reach every cell in one block, not after as many blocks as the
    board is wide. The bias is added after the BatchNorm, so both fold."""

    def __init__(self, channels: int, pooled: int) -> None:
        super().__init__(channels)
        self.pool_conv = nn.Conv2d(channels, pooled, 3, padding=1, bias=False)
        self.pool_bn = nn.BatchNorm2d(pooled)
        self.pool_fc = nn.Linear(2 * pooled, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = F.relu(self.pool_bn(self.pool_conv(x)))  # [B, G, H, W]
        bias = self.pool_fc(torch.cat([g.mean((2, 3)), g.amax((2, 3))], dim=1))  # [B, C]
        y = F.relu(self.bn1(self.conv1(x)) + bias[:, :, None, None])
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)

    def fold_batchnorm(self) -> None:
        super().fold_batchnorm()
        self.pool_conv, self.pool_bn = fuse_conv_bn_eval(self.pool_conv, self.pool_bn), nn.Identity()


class ResNet(PolicyValueNet):
    """Stem conv -> ``blocks`` residual blocks -> policy and value heads
    (``net.kind: resnet``)."""

    def __init__(self, rows: int, cols: int, num_actions: int, config: NetConfig, planes: int = NUM_PLANES
                 ) -> None:
        super().__init__(rows, cols, num_actions, config, planes)
        c = config.channels
        self.stem = nn.Sequential(
            nn.Conv2d(planes, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.trunk = nn.Sequential(*[self._block(i, c) for i in range(config.blocks)])
        p, v = config.policy_channels, config.value_channels
        self.policy_conv = nn.Sequential(nn.Conv2d(c, p, 1, bias=False), nn.BatchNorm2d(p), nn.ReLU())
        self.policy_fc = nn.Linear(p * rows * cols, num_actions)
        self.value_conv = nn.Sequential(nn.Conv2d(c, v, 1, bias=False), nn.BatchNorm2d(v), nn.ReLU())
        self.value_fc = nn.Sequential(
            nn.Linear(v * rows * cols, config.value_hidden), nn.ReLU(), nn.Linear(config.value_hidden, 1))

    def _block(self, index: int, channels: int) -> nn.Module:
        return ResidualBlock(channels)

    def _heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.policy_fc(self.policy_conv(h).flatten(1))  # [B, A]
        value = torch.tanh(self.value_fc(self.value_conv(h).flatten(1))).squeeze(1)  # [B]
        return logits, value

    def fold_batchnorm(self) -> None:
        for block in self.trunk:
            block.fold_batchnorm()
        for seq in (self.stem, self.policy_conv, self.value_conv):
            seq[0], seq[1] = fuse_conv_bn_eval(seq[0], seq[1]), nn.Identity()


class GlobalPoolResNet(ResNet):
    """A :class:`ResNet` whose second, fourth, ... block (the only block of a
    one-block net) is a :class:`GlobalPoolingBlock` with a quarter as many
    pooled channels as the tower has (KataGo's ratio) (``net.kind: gpool``)."""

    def _block(self, index: int, channels: int) -> nn.Module:
        if index % 2 == 1 or self.config.blocks == 1:
            return GlobalPoolingBlock(channels, max(1, channels // 4))
        return ResidualBlock(channels)


class DenseBlock(nn.Module):
    """A residual fully connected layer: ``relu(x + bn(fc(x)))``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width, bias=False)
        self.bn = nn.BatchNorm1d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.bn(self.fc(x)))

    def fold_batchnorm(self) -> None:
        self.fc, self.bn = fuse_linear_bn_eval(self.fc, self.bn), nn.Identity()


class MLPNet(PolicyValueNet):
    """Flattened planes -> ``layers`` hidden layers of ``hidden`` units ->
    policy (one linear map) and value (the resnet's value head on the
    features) (``net.kind: mlp``). Its input is ``planes * rows * cols``
    numbers, so it fits every game's board.

    BatchNorm, not LayerNorm: it folds into the linear map before it, so
    inference runs plain linear maps (int8 in full), while LayerNorm's
    per-position statistics would run in float at every call."""

    convolutional = False

    def __init__(self, rows: int, cols: int, num_actions: int, config: NetConfig, planes: int = NUM_PLANES
                 ) -> None:
        super().__init__(rows, cols, num_actions, config, planes)
        h = config.hidden
        self.stem = nn.Sequential(
            nn.Flatten(), nn.Linear(planes * rows * cols, h, bias=False), nn.BatchNorm1d(h), nn.ReLU())
        self.trunk = nn.Sequential(*[DenseBlock(h) for _ in range(config.layers - 1)])
        self.policy_fc = nn.Linear(h, num_actions)
        self.value_fc = nn.Sequential(nn.Linear(h, config.value_hidden), nn.ReLU(),
                                      nn.Linear(config.value_hidden, 1))

    def _heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy_fc(h), torch.tanh(self.value_fc(h)).squeeze(1)  # [B, A], [B]

    def fold_batchnorm(self) -> None:
        self.stem[1], self.stem[2] = fuse_linear_bn_eval(self.stem[1], self.stem[2]), nn.Identity()
        for block in self.trunk:
            block.fold_batchnorm()


#: the class of each ``net.kind``
NETS: dict[str, type[PolicyValueNet]] = {"resnet": ResNet, "gpool": GlobalPoolResNet, "mlp": MLPNet}
#: the network families (``net.kind``)
NET_KINDS = tuple(NETS)


def flops_per_position(net: PolicyValueNet) -> int:
    """Floating-point operations of one position's policy and value
    (2 per multiply-add of every convolution and linear map; BatchNorm, ReLU
    and additions left out), counted on a forward pass of one position."""
    total = 0

    def count(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        nonlocal total
        if isinstance(module, nn.Conv2d):
            k = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
            total += 2 * k * output[0].numel()
        else:
            total += 2 * module.in_features * output[0].numel()

    was_training = net.training
    hooks = [m.register_forward_hook(count) for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    try:
        with torch.no_grad():
            net.eval()(torch.zeros(1, net.planes, net.rows, net.cols))
    finally:
        for hk in hooks:
            hk.remove()
        net.train(was_training)
    return total
