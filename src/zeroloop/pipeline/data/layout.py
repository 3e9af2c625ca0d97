"""Where a pipeline's files live, relative to one root.

The DVC stages use the repository root (``Layout()``, relative paths, as
dvc.yaml names them); a tuning trial runs the same generation steps under a
temporary root. Per-generation files sit one level down (models/generations/,
reports/generations/) so the report stage can depend on those folders while
writing models/champion.pt and reports/metrics.json: DVC forbids an output
inside one of the stage's own dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Stage numbers mixed into seeds, so every (seed, stage, generation) has its own stream.
STAGE_IDS = {"init": 1, "selfplay": 2, "train": 3, "gate": 4, "evaluate": 5, "positions": 6,
             "test_positions": 7}


def derive_seed(seed: int, stage: str, gen: int = 0) -> int:
    """An independent 32-bit seed per (params seed, stage, generation)."""
    return int(np.random.SeedSequence([seed, STAGE_IDS[stage], gen]).generate_state(1)[0])


@dataclass(frozen=True)
class Layout:
    """Paths of one pipeline's files under ``root``."""

    root: Path = Path()

    def model(self, gen: int, kind: str = "best") -> Path:
        """``kind``: ``best`` (after the gate) or ``candidate`` (after training)."""
        return self.root / "models" / "generations" / f"gen_{gen}" / f"{kind}.pt"

    def data(self, gen: int) -> Path:
        """A generation's self-play shards and their manifest."""
        return self.root / "data" / f"gen_{gen}"

    def partial(self, gen: int, key: str) -> Path:
        """Scratch space for unfinished self-play (not a DVC output, so a killed
        stage's finished shards survive until the rerun uses them)."""
        return self.root / "data" / ".partial" / f"gen_{gen}-{key}"

    def replay_manifest(self, gen: int) -> Path:
        """The replay window after generation ``gen``: its shards and checksums."""
        return self.root / "data" / "replay" / f"gen_{gen}.json"

    def report(self, gen: int, name: str) -> Path:
        return self.root / "reports" / "generations" / f"gen_{gen}" / f"{name}.json"

    @property
    def positions(self) -> Path:
        """Solver-labelled validation positions (measured every generation)."""
        return self.root / "data" / "positions.json"

    @property
    def test_positions(self) -> Path:
        """Solver-labelled held-out test positions (measured on the champion only)."""
        return self.root / "data" / "test_positions.json"

    @property
    def test_report(self) -> Path:
        """The champion's move error on the held-out test positions."""
        return self.root / "reports" / "test.json"

    @property
    def champion(self) -> Path:
        return self.root / "models" / "champion.pt"

    @property
    def plots(self) -> Path:
        return self.root / "reports" / "plots"

    @property
    def metrics(self) -> Path:
        return self.root / "reports" / "metrics.json"
