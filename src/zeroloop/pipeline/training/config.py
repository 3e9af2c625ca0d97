"""Training settings, declared once (params.yaml ``train`` maps onto them)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from zeroloop.engine.config import Annotated, at, check_fields


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How a generation's candidate is trained.

    replay_generations: the replay window, in generations (this one and the
        ones before it); the Oracle Connect Four series grew it from 4 to 20.
    replay_start, replay_grow_every: window growth. ``replay_start`` 0 (off):
        the window holds up to ``replay_generations`` from the start. Above 0:
        generation g's window holds up to
        ``min(replay_generations, replay_start + (g - 1) // replay_grow_every)``
        generations, so early generations, whose games came from weak nets,
        leave the window sooner and later ones keep more (KataGo grows its
        window with the data; AlphaZero.jl schedules its buffer size).
    epochs: passes over the window per generation.
    batch_size: positions per optimiser step (AlphaZero: 4096 over many devices).
    optimizer: ``adam``; ``adamw`` (Adam with decoupled ``weight_decay``,
        Loshchilov & Hutter); or ``sgd`` with ``momentum`` (AlphaZero: SGD, 0.9).
    lr: learning rate at the start of the schedule.
    lr_schedule: ``constant``; ``cosine`` (down to 5% of lr over the epochs);
        ``step`` (times ``lr_step_gamma`` every ``lr_step_epochs`` epochs).
    lr_generation_decay: the learning rate across generations: generation g
        starts its schedule at ``lr * lr_generation_decay ** (g - 1)`` (1: the
        same every generation, as before; 0.9 halves it in about 7 generations).
    lr_step_epochs, lr_step_gamma: ``step`` schedule only: every ``lr_step_epochs``
        epochs the learning rate is multiplied by ``lr_step_gamma``.
    momentum: ``sgd`` only: the momentum (AlphaZero: 0.9).
    l2: c in the loss term c * ||theta||^2 (AlphaZero: 1e-4); the optimiser's
        own weight decay is separate (``weight_decay``), so with plain SGD this
        equals weight decay 2c.
    weight_decay: ``adamw`` only: decoupled decay, theta -= lr * wd * theta per step.
    decay_norm_and_bias: whether ``l2`` and ``weight_decay`` also shrink
        BatchNorm's scales and shifts and the biases (true: every parameter, as
        zeroloop did before; false: convolution and linear weights only, as
        most modern recipes do: shrinking a BatchNorm scale only changes the
        effective learning rate of the layer before it).
    value_q_weight: the value target is ``(1 - w) z + w q``: ``z`` the game's
        result, ``q`` the root search value when the position was played (both
        from the side to move). 0: AlphaZero's z; 1: q alone; in between
        averages the noise of a single game's result with the search's estimate
        (Oracle's Connect Four series; KataGo uses related short-term targets).
    value_q_weight_end, value_q_weight_until: a schedule of that weight across
        generations. ``value_q_weight_end`` null (off): every generation uses
        ``value_q_weight``. Set: generation 1 uses ``value_q_weight``, generation
        ``value_q_weight_until`` and later use ``value_q_weight_end``, and the
        generations between move linearly from one to the other (for example
        0.8 to 0.2: lean on the search's value while the games are weak and
        their results noisy, on the results once the play is good).
    value_q_weight_late, value_q_weight_ply: the weight by move number.
        ``value_q_weight_late`` null (off): every position of a generation
        uses that generation's weight. Set: a position after ``p`` moves
        uses ``w + (value_q_weight_late - w) * min(1, p / value_q_weight_ply)``,
        ``w`` the generation's weight (round 11, docs/strength.md: a higher
        weight helped the end positions' raw policy and hurt begin-hard's
        search, so late positions could take more of the search's value,
        nearly exact near the end, than early ones).
    value_cut_ply: null (off): a position's ``z`` is its game's result. Set
        to a ply ``k``: a game's result stops at its first move from ply
        ``k`` on that was sampled rather than the search's choice (its share
        of the policy target below the top move's): the positions before
        it, and its own, take that position's root search value (from their
        own side) as ``z``, as Watkins' Q(lambda) cuts a return at an
        exploratory action; later positions keep the result. For sampling
        more plies (``selfplay.temperature_moves``) without their noise in
        the earlier positions' results: with ``k`` at the old temperature
        horizon, their results come from the search's value there, not from
        the extra sampled moves after it. The mix with ``value_q_weight``
        applies on top; the train report gives the share of positions cut
        (``value_cut_share``).
    dedup: train on each distinct position of the window once, with its
        policy, result and search-value targets averaged over its occurrences
        (the Oracle Connect Four series); false: every occurrence is a sample.
    augment: map each sample through a random board symmetry of the game.
    start_from: the network a generation's training starts from: ``best``
        (the gate's champion, as AlphaGo Zero) or ``candidate`` (the previous
        generation's candidate, accepted or not: no training is thrown away,
        as Leela Zero and KataGo run it; the gate still decides which network
        plays self-play and which is the champion).
    val_fraction: share of the window held out to report validation losses.
    ema_decay: 0 (off): the candidate is the network as the last optimiser step
        left it. Above 0: the candidate is an exponential moving average of the
        network over this generation's optimiser steps (parameters and
        BatchNorm statistics), ``avg <- d avg + (1 - d) theta`` after each step
        with ``d = min(ema_decay, (1 + t) / (10 + t))`` at step ``t``, so the
        first steps are not swamped by the starting weights; 0.99 averages over
        roughly the last 100 steps (KataGo and most image models publish
        averaged weights).
    channels_last: train in the channels-last (NHWC) memory layout on the CPU, which
        oneDNN's convolutions run faster on CPUs (training samples/s 1.36x on
        a Zen 4, 1.16x on a Zen 3 with AVX2 only: docs/speed.md); false: the default
        NCHW layout, as zeroloop trained before, for byte-identical reruns of
        earlier runs. The saved network is the same either way up to
        floating-point rounding; it is stored in the default layout. A GPU
        trains NCHW either way (cuDNN ran channels-last at 0.64x on an H100).
    opponent_policy_weight: the weight of the opponent-reply head's
        cross-entropy in the loss, for a net that has that head
        (``net.opponent_policy``; KataGo weighs it 0.15); no effect otherwise.
    ownership_weight: the weight of the final-board head's loss (the mean
        over cells of each cell's cross-entropy), for a net that has that
        head (``net.ownership``; KataGo: 1.5 over the board's area on a
        per-cell sum, the same as 1.5 on this mean); no effect otherwise.
    """

    replay_generations: Annotated[int, at.Interval(ge=1, le=1000)] = 4
    replay_start: Annotated[int, at.Interval(ge=0, le=1000)] = 0
    replay_grow_every: Annotated[int, at.Interval(ge=1, le=1000)] = 1
    epochs: Annotated[int, at.Interval(ge=1, le=1000)] = 4
    batch_size: Annotated[int, at.Interval(ge=1, le=65536)] = 256
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: Annotated[float, at.Interval(gt=0, le=10)] = 2e-3
    lr_schedule: Literal["constant", "cosine", "step"] = "cosine"
    lr_generation_decay: Annotated[float, at.Interval(gt=0, le=1)] = 1.0
    lr_step_epochs: Annotated[int, at.Ge(1)] = 2
    lr_step_gamma: Annotated[float, at.Interval(gt=0, le=1)] = 0.3
    momentum: Annotated[float, at.Interval(ge=0, lt=1)] = 0.9
    l2: Annotated[float, at.Interval(ge=0, le=1)] = 1e-4
    weight_decay: Annotated[float, at.Interval(ge=0, le=1)] = 0.0
    decay_norm_and_bias: bool = True
    value_q_weight: Annotated[float, at.Interval(ge=0, le=1)] = 0.0
    value_q_weight_end: Annotated[float, at.Interval(ge=0, le=1)] | None = None
    value_q_weight_until: Annotated[int, at.Interval(ge=2, le=100000)] = 6
    value_q_weight_late: Annotated[float, at.Interval(ge=0, le=1)] | None = None
    value_q_weight_ply: Annotated[int, at.Interval(ge=1, le=100000)] = 30
    value_cut_ply: Annotated[int, at.Interval(ge=0, le=100000)] | None = None
    dedup: bool = False
    augment: bool = True
    start_from: Literal["best", "candidate"] = "best"
    val_fraction: Annotated[float, at.Interval(ge=0, lt=0.5)] = 0.05
    ema_decay: Annotated[float, at.Interval(ge=0, lt=1)] = 0.0
    channels_last: bool = True
    opponent_policy_weight: Annotated[float, at.Interval(ge=0, le=10)] = 0.15
    ownership_weight: Annotated[float, at.Interval(ge=0, le=10)] = 1.5

    def __post_init__(self) -> None:
        check_fields(self, "train")
        if self.replay_start > self.replay_generations:
            raise ValueError(f"train.replay_start={self.replay_start} is above train.replay_generations="
                             f"{self.replay_generations}, the most the window grows to")
        if self.weight_decay and self.optimizer != "adamw":
            raise ValueError(f"train.weight_decay={self.weight_decay} is AdamW's decoupled decay; "
                             f"set train.optimizer: adamw, or use train.l2 with {self.optimizer}")

    def window_generations(self, gen: int) -> int:
        """How many generations generation ``gen``'s replay window holds at most."""
        if not self.replay_start:
            return self.replay_generations
        return min(self.replay_generations, self.replay_start + (gen - 1) // self.replay_grow_every)

    def for_generation(self, gen: int) -> TrainConfig:
        """The settings generation ``gen`` trains with: its learning rate
        after ``lr_generation_decay``, its value-target weight after the
        ``value_q_weight_end`` schedule."""
        changes = {}
        if self.lr_generation_decay != 1.0:
            changes["lr"] = self.lr * self.lr_generation_decay ** (gen - 1)
        if self.value_q_weight_end is not None:
            w0, w1 = self.value_q_weight, self.value_q_weight_end
            t = min(1.0, max(0, gen - 1) / (self.value_q_weight_until - 1))
            changes["value_q_weight"] = w0 + (w1 - w0) * t
        return replace(self, **changes) if changes else self
