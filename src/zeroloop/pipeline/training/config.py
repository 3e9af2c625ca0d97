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
    optimizer: ``adam``, or ``sgd`` with ``momentum`` (AlphaZero: SGD, 0.9).
    lr: learning rate at the start of the schedule.
    lr_schedule: ``constant``; ``cosine`` (down to 5% of lr over the epochs);
        ``step`` (times ``lr_step_gamma`` every ``lr_step_epochs`` epochs).
    l2: c in the loss term c * ||theta||^2 over every weight (AlphaZero: 1e-4);
        the optimiser's own weight decay is off, so with plain SGD this equals
        weight decay 2c.
    augment: map each sample through a random board symmetry of the game.
    val_fraction: share of the window held out to report validation losses.
    """

    replay_generations: Annotated[int, at.Interval(ge=1, le=1000)] = 4
    epochs: Annotated[int, at.Interval(ge=1, le=1000)] = 4
    batch_size: Annotated[int, at.Interval(ge=1, le=65536)] = 256
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: Annotated[float, at.Interval(gt=0, le=10)] = 2e-3
    lr_schedule: Literal["constant", "cosine", "step"] = "cosine"
    lr_step_epochs: Annotated[int, at.Ge(1)] = 2
    lr_step_gamma: Annotated[float, at.Interval(gt=0, le=1)] = 0.3
    momentum: Annotated[float, at.Interval(ge=0, lt=1)] = 0.9
    l2: Annotated[float, at.Interval(ge=0, le=1)] = 1e-4
    augment: bool = True
    val_fraction: Annotated[float, at.Interval(ge=0, lt=0.5)] = 0.05

    def __post_init__(self) -> None:
        check_fields(self, "train")
