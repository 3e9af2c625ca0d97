"""Training data: the replay window read from shards, and symmetry augmentation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from zeroloop.engine.games import Game
from zeroloop.engine.selfplay import unpack_planes
from zeroloop.pipeline.storage import DamagedFileError, load_shard


@dataclass
class ReplayData:
    """planes ``[N, 4, H, W]`` float32, policy ``[N, A]`` float32 (rows sum
    to 1), z ``[N]`` float32 results from the side to move."""

    planes: np.ndarray
    policy: np.ndarray
    z: np.ndarray

    def __len__(self) -> int:
        return len(self.z)


def load_replay(game: Game, shards: Sequence[str | Path]) -> ReplayData:
    """Read and check shards (checksum, game); positions of all of them."""
    planes, policy, z = [], [], []
    for path in shards:
        arrays, meta = load_shard(path)
        made_for = meta.get("identity", {}).get("game")
        if made_for != game.name:
            raise DamagedFileError(f"{path}: shard is for {made_for!r}, not {game.name!r}")
        planes.append(unpack_planes(arrays["planes"], game))
        p = arrays["policy"].astype(np.float32)
        policy.append(p / np.maximum(p.sum(axis=1, keepdims=True), 1e-8))  # float16 rounding
        z.append(arrays["z"].astype(np.float32))
    if not planes:
        raise ValueError("the replay window holds no shards")
    return ReplayData(np.concatenate(planes), np.concatenate(policy), np.concatenate(z))


class SymmetryAugment:
    """Maps each sample of a batch through its own random board symmetry.

    Planes and policy go through the same cell permutation (the game's
    :class:`~zeroloop.engine.games.Symmetry`), so they stay aligned.
    """

    def __init__(self, game: Game) -> None:
        syms = game.symmetries()
        self.rows, self.cols = game.rows, game.cols
        self.cells = torch.as_tensor(np.stack([s.cell_src for s in syms]), dtype=torch.long)  # [S, H*W]
        self.actions = torch.as_tensor(np.stack([s.action_src for s in syms]), dtype=torch.long)  # [S, A]

    @property
    def count(self) -> int:
        return len(self.cells)

    def apply(self, planes: torch.Tensor, policy: torch.Tensor, which: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """planes ``[B, C, H, W]``, policy ``[B, A]``, which ``[B]`` symmetry indices."""
        b, c = planes.shape[:2]
        cells = self.cells.to(planes.device)[which]  # [B, H*W]
        flat = planes.reshape(b, c, -1).gather(2, cells[:, None, :].expand(b, c, cells.shape[1]))
        acts = self.actions.to(policy.device)[which]  # [B, A]
        return flat.reshape(planes.shape), policy.gather(1, acts)

    def random(self, planes: torch.Tensor, policy: torch.Tensor, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        which = torch.randint(self.count, (planes.shape[0],), generator=generator)
        return self.apply(planes, policy, which.to(planes.device))
