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
    both from the side to move; ownership ``[N, H, W]`` float32,
    the final board of the position's game from its side to move
    (:func:`final_boards`; None where not asked for)."""

    planes: np.ndarray
    policy: np.ndarray
    z: np.ndarray
    q: np.ndarray
    ownership: np.ndarray | None = None

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

        return ReplayData(self.planes[first[order]], mean(self.policy), mean(self.z), mean(self.q),
                          ownership=None if self.ownership is None else mean(self.ownership))

    def value_target(self, q_weight: float) -> np.ndarray:
        """``(1 - w) z + w q``, float32, ``w = q_weight``."""
        if q_weight == 0.0:
            return self.z
        return ((1.0 - q_weight) * self.z + q_weight * self.q).astype(np.float32)


def _plies(lengths: np.ndarray) -> np.ndarray:
    """``[N]`` int64: each position's ply, its index within its game, from a
    shard's ``[G]`` game lengths."""
    lengths = lengths.astype(np.int64)
    return np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def final_boards(game: Game, actions: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``[N, H, W]`` float32: for each position of the games (``actions`` of
    games of ``lengths`` laid end to end, each from the start), its game's
    final board from the position's side to move: +1 where it has a stone at
    the end, -1 the opponent, 0 an empty cell (the ownership target). The
    games are replayed with the game's rules; players alternate strictly
    (passes are moves), so a position ``k`` plies before the end sees the
    final position's side to move as itself when ``k`` is even. A game with
    an ``ownership(states)`` of its own (Go: the area, territory included)
    gives the final board that way."""
    ends = np.cumsum(lengths.astype(np.int64))
    finals = []
    for end, length in zip(ends.tolist(), lengths.tolist()):
        state = game.initial_state()
        for a in actions[end - length:end].tolist():
            state = game.apply(state, a)
        finals.append(state)
    if not finals:
        return np.zeros((0, game.rows, game.cols), np.float32)
    if hasattr(game, "ownership"):
        board = game.ownership(finals)
    else:
        planes = game.encode(finals)  # [G, P, H, W] from each final position's side to move
        board = planes[:, 0] - planes[:, 1]
    left = np.repeat(lengths, lengths) - _plies(lengths)  # plies from a position to its game's end
    sign = np.where(left % 2 == 0, 1.0, -1.0).astype(np.float32)
    return np.repeat(board, lengths, axis=0) * sign[:, None, None]


def load_replay(game: Game, shards: Sequence[str | Path], ownership: bool = False) -> ReplayData:
    """Read and check shards (checksum, game); positions of all of them.
    ``ownership``: also each position's game's final board (:func:`final_boards`)."""
    planes, policy, z, q, owners = [], [], [], [], []
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
        if ownership:
            owners.append(final_boards(game, arrays["actions"], arrays["lengths"])[keep])
        z.append(arrays["z"][keep].astype(np.float32))
        q.append(arrays["value"][keep].astype(np.float32))
    if not planes:
        raise ValueError("the replay window holds no shards")
    return ReplayData(np.concatenate(planes), np.concatenate(policy), np.concatenate(z), np.concatenate(q),
                      ownership=np.concatenate(owners) if ownership else None)


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
