"""Training data: the replay window read from shards, and symmetry augmentation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from zeroloop.engine.games import Game
from zeroloop.engine.selfplay import unpack_planes
from zeroloop.pipeline.data.storage import DamagedFileError, load_shard


@dataclass
class ReplayData:
    """planes ``[N, 4, H, W]`` float32, policy ``[N, A]`` float32 (rows sum
    to 1), z ``[N]`` float32 results and q ``[N]`` float32 root search values,
    both from the side to move."""

    planes: np.ndarray
    policy: np.ndarray
    z: np.ndarray
    q: np.ndarray

    def __len__(self) -> int:
        return len(self.z)

    def deduplicated(self) -> ReplayData:
        """Each distinct position once, its targets (policy, z, q) averaged over
        its occurrences (as the Oracle Connect Four series trained): the
        opening positions that every game repeats stop dominating the window,
        and a position's targets average the noise of its games. Positions in
        order of their first occurrence."""
        n = len(self)
        flat = np.ascontiguousarray(self.planes.reshape(n, -1))
        keys = flat.view(np.dtype((np.void, flat.shape[1] * flat.itemsize))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        counts = np.bincount(inverse).astype(np.float32)
        order = np.argsort(first, kind="stable")  # unique rows by first occurrence
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        row = rank[inverse.ravel()]

        def mean(x: np.ndarray) -> np.ndarray:
            total = np.zeros((len(order),) + x.shape[1:], np.float64)
            np.add.at(total, row, x)
            return (total / counts[order].reshape((-1,) + (1,) * (x.ndim - 1))).astype(np.float32)

        return ReplayData(self.planes[first[order]], mean(self.policy), mean(self.z), mean(self.q))

    def value_target(self, q_weight: float) -> np.ndarray:
        """``(1 - w) z + w q``, float32, ``w = q_weight``."""
        if q_weight == 0.0:
            return self.z
        return ((1.0 - q_weight) * self.z + q_weight * self.q).astype(np.float32)


def load_replay(game: Game, shards: Sequence[str | Path]) -> ReplayData:
    """Read and check shards (checksum, game); positions of all of them."""
    planes, policy, z, q = [], [], [], []
    for path in shards:
        arrays, meta = load_shard(path)
        made_for = meta.get("identity", {}).get("game")
        if made_for != game.name:
            raise DamagedFileError(f"{path}: shard is for {made_for!r}, not {game.name!r}")
        # positions from fast searches (playout cap) are played, not trained on
        keep = arrays["full"] if "full" in arrays else slice(None)
        planes.append(unpack_planes(arrays["planes"][keep], game))
        full = arrays["policy"].astype(np.float32)
        full /= np.maximum(full.sum(axis=1, keepdims=True), 1e-8)  # float16 rounding
        policy.append(full[keep])
        z.append(arrays["z"][keep].astype(np.float32))
        q.append(arrays["value"][keep].astype(np.float32))
    if not planes:
        raise ValueError("the replay window holds no shards")
    return ReplayData(np.concatenate(planes), np.concatenate(policy), np.concatenate(z), np.concatenate(q))


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
