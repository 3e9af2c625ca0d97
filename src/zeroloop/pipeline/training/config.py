"""Training settings, declared once (params.yaml ``train`` maps onto them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from zeroloop.engine.config import Annotated, at, check_fields


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How a generation's candidate is trained.

    replay_generations: the replay window, in generations (this one and the
        ones before it); the Oracle Connect Four series grew it from 4 to 20.
    epochs: passes over the window per generation.
    batch_size: positions per optimiser step (AlphaZero: 4096 over many devices).
    optimizer: ``adam``; ``adamw`` (Adam with decoupled ``weight_decay``,
        Loshchilov & Hutter); or ``sgd`` with ``momentum`` (AlphaZero: SGD, 0.9).
    lr: learning rate at the start of the schedule.
    lr_schedule: ``constant``; ``cosine`` (set once an epoch: epoch k of E, from 0, at
        lr x (0.05 + 0.95 (1 + cos(pi k / E)) / 2), so with 2 epochs the second runs
        at 52.5% of lr; set every optimiser step instead, from lr to 5% of it over the
        generation's steps, it read a little worse: round 52); ``step`` (times
        ``lr_step_gamma`` every ``lr_step_epochs`` epochs).
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
    dedup: train on each distinct position of the window once, with its
        policy, result and search-value targets averaged over its occurrences
        (the Oracle Connect Four series); false: every occurrence is a sample.
    augment: map each sample through a random board symmetry of the game.
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
        a Zen 4, 1.16x on a Zen 3 with AVX2 only: docs/lab/speed-log.md); false: the default
        NCHW layout, as zeroloop trained before, for byte-identical reruns of
        earlier runs. The saved network is the same either way up to
        floating-point rounding; it is stored in the default layout. A GPU
        trains NCHW either way (cuDNN ran channels-last at 0.64x on an H100).
    """

    replay_generations: Annotated[int, at.Interval(ge=1, le=1000)] = 4
    epochs: Annotated[int, at.Interval(ge=1, le=1000)] = 2
    batch_size: Annotated[int, at.Interval(ge=1, le=65536)] = 128
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: Annotated[float, at.Interval(gt=0, le=10)] = 2e-3
    lr_schedule: Literal["constant", "cosine", "step"] = "cosine"
    lr_step_epochs: Annotated[int, at.Ge(1)] = 2
    lr_step_gamma: Annotated[float, at.Interval(gt=0, le=1)] = 0.3
    momentum: Annotated[float, at.Interval(ge=0, lt=1)] = 0.9
    l2: Annotated[float, at.Interval(ge=0, le=1)] = 1e-4
    weight_decay: Annotated[float, at.Interval(ge=0, le=1)] = 0.0
    decay_norm_and_bias: bool = True
    value_q_weight: Annotated[float, at.Interval(ge=0, le=1)] = 0.5
    dedup: bool = True
    augment: bool = True
    val_fraction: Annotated[float, at.Interval(ge=0, lt=0.5)] = 0.05
    ema_decay: Annotated[float, at.Interval(ge=0, lt=1)] = 0.0
    channels_last: bool = True

    def __post_init__(self) -> None:
        check_fields(self, "train")
        if self.weight_decay and self.optimizer != "adamw":
            raise ValueError(f"train.weight_decay={self.weight_decay} is AdamW's decoupled decay; "
                             f"set train.optimizer: adamw, or use train.l2 with {self.optimizer}")
