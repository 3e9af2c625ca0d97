"""The models a user can pick for a game: the pipeline's champion, each
generation's best and candidate, the reference run's champion (Connect
Four), the small model shipped with the package, and an untrained network."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeroloop.engine.games import Game
from zeroloop.pipeline.data.layout import Layout
from zeroloop.pipeline.data.storage import DamagedFileError, read_model_header

#: Small models that ship with the package, so play works before any training.
SHIPPED_DIR = Path(__file__).parents[2] / "models"  # package data: src/zeroloop/models


@dataclass(frozen=True)
class ModelInfo:
    id: str  # champion | gen3 | gen3-candidate | reference | shipped | random
    label: str
    path: str | None  # None: an untrained network

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "path": self.path}


def _model_game(path: Path) -> str | None:
    try:
        return read_model_header(path)["game"]
    except (FileNotFoundError, DamagedFileError):
        return None


def list_models(game: Game, root: str | Path = ".") -> list[ModelInfo]:
    """The models for ``game``, best guess first: the pipeline's champion, each
    generation's best and candidate (newest first), the reference run's
    champion (Connect Four: the strongest shipped model, so a fresh clone plays
    it), the small shipped model, and an untrained network. Files for other
    games and damaged files are left out."""
    layout = Layout(Path(root))
    out: list[ModelInfo] = []
    champion = layout.champion
    if _model_game(champion) == game.name:
        out.append(ModelInfo("champion", "champion (the pipeline's best)", str(champion)))
    gens = []
    for d in layout.model(0).parent.parent.glob("gen_*"):
        if m := re.fullmatch(r"gen_(\d+)", d.name):
            gens.append((int(m.group(1)), d))
    for g, d in sorted(gens, reverse=True):
        for kind, suffix, label in (("best", "", "best after gate"),
                                    ("candidate", "-candidate", "candidate")):
            path = d / f"{kind}.pt"
            if _model_game(path) == game.name:
                out.append(ModelInfo(f"gen{g}{suffix}", f"generation {g} ({label})", str(path)))
    reference = SHIPPED_DIR / "reference" / f"{game.name}.pt"
    if _model_game(reference) == game.name:
        out.append(ModelInfo("reference", "the default run's champion (the reference run)", str(reference)))
    shipped = SHIPPED_DIR / f"{game.name}.pt"
    if _model_game(shipped) == game.name:
        out.append(ModelInfo("shipped", "shipped model (trained with zeroloop)", str(shipped)))
    out.append(ModelInfo("random", "untrained network", None))
    return out
