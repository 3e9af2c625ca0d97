"""Network inference for search: an :data:`~zeroloop.engine.search.Evaluator` over a
:class:`PolicyValueNet`, and device selection."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from zeroloop.engine.games.base import Game, State
from zeroloop.engine.nn.net import PolicyValueNet


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cpu``/``cuda[:n]`` as given."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device {device!r}: expected auto, cpu or cuda[:N]") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device")
    return dev


class NetworkEvaluator:
    """Batched evaluation of positions: softmax priors ``[B, A]`` and values ``[B]``.

    The net is put in eval mode and run under ``torch.inference_mode``.
    """

    def __init__(self, game: Game, net: PolicyValueNet, device: str | torch.device = "auto") -> None:
        self.game = game
        self.device = resolve_device(device) if isinstance(device, str) else device
        self.net = net.to(self.device).eval()

    def __call__(self, states: Sequence[State]) -> tuple[np.ndarray, np.ndarray]:
        return self.evaluate_planes(self.game.encode(states))

    def evaluate_planes(self, planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            x = torch.from_numpy(planes).to(self.device, non_blocking=True)
            logits, value = self.net(x)
            priors = torch.softmax(logits.float(), dim=1)
            return priors.cpu().numpy(), value.float().cpu().numpy()


def uniform_evaluator(game: Game):
    """An oracle with uniform priors and value 0 (pure search, for tests and baselines)."""

    def evaluate(states: Sequence[State]) -> tuple[np.ndarray, np.ndarray]:
        return (np.ones((len(states), game.num_actions), np.float32),
                np.zeros(len(states), np.float32))

    return evaluate
