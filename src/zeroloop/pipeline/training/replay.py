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
    both from the side to move; ply ``[N]`` float32, the moves played before
    the position in its game (None where unknown); cut_share: the share of
    positions whose result was cut at a sampled move (None: no cut asked);
    opponent ``[N, A]`` float32, the policy target of the next position of
    the position's game, the opponent's reply (all zeros after a game's
    last move; None where not asked for); ownership ``[N, H, W]`` float32,
    the final board of the position's game from its side to move
    (:func:`final_boards`; None where not asked for)."""

    planes: np.ndarray
    policy: np.ndarray
    z: np.ndarray
    q: np.ndarray
    ply: np.ndarray | None = None
    cut_share: float | None = None
    opponent: np.ndarray | None = None
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
                          None if self.ply is None else mean(self.ply),
                          opponent=None if self.opponent is None else mean(self.opponent),
                          ownership=None if self.ownership is None else mean(self.ownership))

    def value_target(self, q_weight: float, late_weight: float | None = None, late_ply: int = 1
                     ) -> np.ndarray:
        """``(1 - w) z + w q``, float32: ``w = q_weight``, or with ``late_weight``
        moving linearly from ``q_weight`` at ply 0 to ``late_weight`` at
        ``late_ply`` and later."""
        if late_weight is None:
            if q_weight == 0.0:
                return self.z
            w = q_weight
        elif self.ply is None:
            raise ValueError("a value weight by move number needs each position's ply; these data lack it")
        else:
            w = q_weight + (late_weight - q_weight) * np.clip(self.ply / late_ply, 0.0, 1.0)
        return ((1.0 - w) * self.z + w * self.q).astype(np.float32)


def _plies(lengths: np.ndarray) -> np.ndarray:
    """``[N]`` int64: each position's ply, its index within its game, from a
    shard's ``[G]`` game lengths."""
    lengths = lengths.astype(np.int64)
    return np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def next_policies(policy: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``[N, A]``: each position's next position's row of ``policy`` within its
    game (the opponent's reply, as the search saw it), zeros after a game's
    last move; games of ``lengths`` laid end to end."""
    nxt = np.zeros_like(policy)
    nxt[:-1] = policy[1:]
    nxt[np.cumsum(lengths.astype(np.int64)) - 1] = 0.0
    return nxt


def final_boards(game: Game, actions: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``[N, H, W]`` float32: for each position of the games (``actions`` of
    games of ``lengths`` laid end to end, each from the start), its game's
    final board from the position's side to move: +1 where it has a stone at
    the end, -1 the opponent, 0 an empty cell (the ownership target). The
    games are replayed with the game's rules; players alternate strictly
    (passes are moves), so a position ``k`` plies before the end sees the
    final position's side to move as itself when ``k`` is even."""
    ends = np.cumsum(lengths.astype(np.int64))
    finals = []
    for end, length in zip(ends.tolist(), lengths.tolist()):
        state = game.initial_state()
        for a in actions[end - length:end].tolist():
            state = game.apply(state, a)
        finals.append(state)
    if not finals:
        return np.zeros((0, game.rows, game.cols), np.float32)
    planes = game.encode(finals)  # [G, P, H, W] from each final position's side to move
    board = planes[:, 0] - planes[:, 1]
    left = np.repeat(lengths, lengths) - _plies(lengths)  # plies from a position to its game's end
    sign = np.where(left % 2 == 0, 1.0, -1.0).astype(np.float32)
    return np.repeat(board, lengths, axis=0) * sign[:, None, None]


def cut_at_sampled_moves(arrays: dict[str, np.ndarray], from_ply: int) -> tuple[np.ndarray, np.ndarray]:
    """A shard's value results with each game's return cut at its sampled moves.

    A move at ply ``from_ply`` or later whose share of the policy target is
    below the top move's was sampled (temperature), not the search's choice;
    a result the game reached after it says as much about that sample as
    about the positions before it. So a position followed, in its own game,
    by such a move (its own move included) takes as its result the root
    search value of the first such move's position, seen from its own side
    (players alternate strictly, so the sign flips with each ply between):
    Watkins' Q(lambda) cuts its return at an exploratory action the same way.
    Positions with no such move after them keep the game's result. Returns
    ``(z, cut)``: ``[N]`` float32 results from the side to move and ``[N]``
    bool, whether the position's result was replaced."""
    policy, actions = arrays["policy"], arrays["actions"].astype(np.int64)
    played = policy[np.arange(len(actions)), actions]
    lengths = arrays["lengths"].astype(np.int64)
    starts = np.cumsum(lengths) - lengths
    sampled = (played < policy.max(axis=1)) & (_plies(lengths) >= from_ply)
    value = arrays["value"].astype(np.float32)
    z = arrays["z"].astype(np.float32)
    cut = np.zeros(len(actions), np.bool_)
    for start, length in zip(starts.tolist(), lengths.tolist()):
        at = start + np.flatnonzero(sampled[start:start + length])
        if not len(at):
            continue
        # each position's next sampled move at or after it: positions after the last keep z
        pos = np.arange(start, at[-1] + 1)
        nxt = at[np.searchsorted(at, pos)]
        z[pos] = value[nxt] * np.where((nxt - pos) % 2 == 0, 1.0, -1.0).astype(np.float32)
        cut[pos] = True
    return z, cut


def load_replay(game: Game, shards: Sequence[str | Path], cut_ply: int | None = None,
                opponent: bool = False, ownership: bool = False) -> ReplayData:
    """Read and check shards (checksum, game); positions of all of them.
    ``cut_ply`` set: results cut at sampled moves from that ply on
    (:func:`cut_at_sampled_moves`); None: each game's result. ``opponent``:
    also each position's opponent reply target (:func:`next_policies`);
    ``ownership``: also its game's final board (:func:`final_boards`)."""
    planes, policy, z, q, ply, replies, owners = [], [], [], [], [], [], []
    cut_count = 0
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
        if opponent:
            replies.append(next_policies(full, arrays["lengths"])[keep])
        if ownership:
            owners.append(final_boards(game, arrays["actions"], arrays["lengths"])[keep])
        if cut_ply is None:
            z.append(arrays["z"][keep].astype(np.float32))
        else:
            cut_z, cut = cut_at_sampled_moves(arrays, cut_ply)
            z.append(cut_z[keep])
            cut_count += int(cut[keep].sum())
        q.append(arrays["value"][keep].astype(np.float32))
        ply.append(_plies(arrays["lengths"]).astype(np.float32)[keep])
    if not planes:
        raise ValueError("the replay window holds no shards")
    data = ReplayData(np.concatenate(planes), np.concatenate(policy), np.concatenate(z), np.concatenate(q),
                      np.concatenate(ply), opponent=np.concatenate(replies) if opponent else None,
                      ownership=np.concatenate(owners) if ownership else None)
    if cut_ply is not None:
        data.cut_share = cut_count / max(1, len(data))
    return data


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

    def apply(self, planes: torch.Tensor, policy: torch.Tensor, which: torch.Tensor,
              *more: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """planes ``[B, C, H, W]``, policy ``[B, A]``, which ``[B]`` symmetry indices;
        ``more``: other ``[B, A]`` move distributions of the same positions (the
        opponent's reply), mapped as the policy is."""
        b, c = planes.shape[:2]
        cells = self.cells.to(planes.device)[which]  # [B, H*W]
        flat = planes.reshape(b, c, -1).gather(2, cells[:, None, :].expand(b, c, cells.shape[1]))
        acts = self.actions.to(policy.device)[which]  # [B, A]
        return (flat.reshape(planes.shape), policy.gather(1, acts), *(m.gather(1, acts) for m in more))

    def random(self, planes: torch.Tensor, policy: torch.Tensor, generator: torch.Generator | None = None,
               *more: torch.Tensor) -> tuple[torch.Tensor, ...]:
        which = torch.randint(self.count, (planes.shape[0],), generator=generator)
        return self.apply(planes, policy, which.to(planes.device), *more)
