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


def _places(game: Game, root: str | Path) -> list[ModelInfo]:
    """Every file that would be listed for ``game`` if it held its model,
    in the listing's order (generations newest first)."""
    layout = Layout(Path(root))
    out = [ModelInfo("champion", "champion (the pipeline's best)", str(layout.champion))]
    gens = []
    for d in layout.model(0).parent.parent.glob("gen_*"):
        if m := re.fullmatch(r"gen_(\d+)", d.name):
            gens.append((int(m.group(1)), d))
    for g, d in sorted(gens, reverse=True):
        for kind, suffix, label in (("best", "", "best after gate"),
                                    ("candidate", "-candidate", "candidate")):
            out.append(ModelInfo(f"gen{g}{suffix}", f"generation {g} ({label})", str(d / f"{kind}.pt")))
    out.append(ModelInfo("reference", "the default run's champion (the reference run)",
                         str(SHIPPED_DIR / "reference" / f"{game.name}.pt")))
    out.append(ModelInfo("shipped", "shipped model (trained with zeroloop)",
                         str(SHIPPED_DIR / f"{game.name}.pt")))
    return out


def list_models(game: Game, root: str | Path = ".") -> list[ModelInfo]:
    """The models for ``game``, best guess first: the pipeline's champion, each
    generation's best and candidate (newest first), the reference run's
    champion (Connect Four: the strongest shipped model, so a fresh clone plays
    it), the small shipped model, and an untrained network. Files for other
    games and damaged files are left out (:func:`damaged_model` says why an
    id is missing)."""
    out = [m for m in _places(game, root) if _model_game(Path(m.path)) == game.name]
    out.append(ModelInfo("random", "untrained network", None))
    return out


def damaged_model(game: Game, model_id: str, root: str | Path = ".") -> str | None:
    """Why the file behind ``model_id`` (gen2, champion, ...) is damaged, its
    path named, or None when it is missing, sound or no such id exists."""
    for m in _places(game, root):
        if m.id == model_id:
            try:
                read_model_header(m.path)
            except DamagedFileError as exc:
                return str(exc)
            except FileNotFoundError:
                return None
    return None
