"""The champion as an MLflow model: a pyfunc over its zeroloop model file.

``mlflow.pyfunc.load_model("models:/zeroloop-<game>@champion").predict(frame)``
takes a DataFrame with a ``position`` column, each the moves from the start
in the game's notation as ``zeroloop analyse`` reads them ("4453" in Connect
Four, "d3 c3" in Othello, "" the start), and an optional ``simulations``
column (the search's own count without it). It returns one row per
position: ``position`` (as the game writes it), ``move`` (the search's),
``value`` (for the side to move, -1..1) and ``policy`` (legal move -> the
search's share). A bad position raises an error that names it, which
``mlflow models serve`` answers with a 400.

The model file is the MLflow model's one artifact, byte for byte (the weights
are not saved again in another form); its header names the game. The search
settings the pipeline evaluates with are the model's ``model_config``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.types.schema import ColSpec, DataType, Map, Schema

from zeroloop.engine.games import Game, make_game
from zeroloop.engine.search import SearchConfig
from zeroloop.pipeline.analysis import Analyser
from zeroloop.pipeline.data.storage import read_model_header

#: the name of the logged model, and of the model file among its artifacts
NAME = "champion"
MODEL_FILE = "model"

SIGNATURE = ModelSignature(
    inputs=Schema([ColSpec(DataType.string, "position"),
                   ColSpec(DataType.long, "simulations", required=False)]),
    outputs=Schema([ColSpec(DataType.string, "position"), ColSpec(DataType.string, "move"),
                    ColSpec(DataType.double, "value"), ColSpec(Map(DataType.double), "policy")]))


class ChampionModel(mlflow.pyfunc.PythonModel):
    """The pyfunc: :class:`~zeroloop.pipeline.analysis.Analyser` over the
    model file, searching as ``model_config["search"]`` says, its network on
    ``model_config["device"]`` in ``model_config["precision"]``."""

    def load_context(self, context) -> None:
        path = context.artifacts[MODEL_FILE]
        config = context.model_config or {}
        search = SearchConfig(**config.get("search", {}))
        self.analyser = Analyser.for_model(read_model_header(path)["game"], path, search,
                                           device=config.get("device", "auto"),
                                           precision=config.get("precision", "fp32"))

    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None
                ) -> pd.DataFrame:
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        if "position" not in frame.columns:
            raise MlflowException.invalid_parameter_value(
                f"expected a 'position' column (moves from the start in {self.analyser.game.name}'s "
                f"notation), got columns {list(frame.columns)}")
        positions = [_text(p) for p in frame["position"]]
        counts = list(frame["simulations"]) if "simulations" in frame.columns else [None] * len(frame)
        bad, asked = [], []
        for i, (text, count) in enumerate(zip(positions, counts, strict=True)):
            try:  # every row checked before any is searched: one error names every bad row
                self.analyser.position(text)
                asked.append(self.analyser.search(_count(count)).config.simulations)
            except ValueError as exc:
                bad.append(f"position {i} {text!r}: {exc}")
        if bad:
            raise MlflowException.invalid_parameter_value("; ".join(bad))
        answers = [self.analyser.analyse(text, n) for text, n in zip(positions, asked, strict=True)]
        return pd.DataFrame({"position": [a["moves"] for a in answers],
                             **{k: [a[k] for a in answers] for k in ("move", "value", "policy")}})


def _text(cell: Any) -> str:
    """A position cell as text; an empty cell (None, NaN) is the start."""
    return "" if cell is None or (isinstance(cell, float) and math.isnan(cell)) else str(cell)


def _count(cell: Any) -> int | None:
    """A ``simulations`` cell: None when empty, else a whole number (or ``ValueError``)."""
    if cell is None or (isinstance(cell, float | np.floating) and math.isnan(cell)):
        return None
    if isinstance(cell, bool | np.bool_) or not float(cell).is_integer():
        raise ValueError(f"simulations={cell!r}: must be a whole number")
    return int(cell)


def input_example(game: Game, simulations: int) -> pd.DataFrame:
    """Two positions of ``game``: the start, and the middle legal move played
    from it (Connect Four "4", tic-tac-toe "5"), each at ``simulations``."""
    legal = np.flatnonzero(game.legal_mask(game.initial_state()))
    opening = game.format_moves([int(legal[len(legal) // 2])])
    return pd.DataFrame({"position": ["", opening], "simulations": [simulations, simulations]})


def requirements() -> list[str]:
    """The project itself (it brings MLflow, torch and the rest at the versions it pins)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return [f"zeroloop=={version('zeroloop')}"]
    except PackageNotFoundError:
        return ["zeroloop"]


@contextmanager
def global_tracking_uri(uri: str) -> Iterator[None]:
    """``uri`` as MLflow's global tracking URI for a while: its fluent API
    (``log_model`` and the run it logs to) and its registry, resolving a
    ``models:/<id>`` source, read that one, not a client's. After, the global
    is unset again (zeroloop never sets it otherwise), so MLflow reads
    ``MLFLOW_TRACKING_URI`` afresh, which is restored (MLflow sets and unsets
    it along with the global): leaving the global set would pin every later
    default client of this process to ``uri``."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(None)
        if before is not None:
            os.environ["MLFLOW_TRACKING_URI"] = before


def log_champion_model(run_id: str, model_file: str | Path, search: SearchConfig, precision: str,
                       metadata: dict[str, Any]) -> Any:
    """Log ``model_file`` as the pyfunc :data:`NAME` on run ``run_id`` of the
    global tracking URI (:func:`global_tracking_uri`; MLflow 3: a logged
    model whose source run is ``run_id``): it searches with ``search``, its
    network in ``precision`` (``runtime.precision``, resolved where it is
    loaded) on the device there, and ``metadata`` is in its MLmodel file.
    Returns MLflow's ``ModelInfo`` (``model_uri``, ``model_id``)."""
    example = input_example(make_game(read_model_header(model_file)["game"]), search.simulations)
    config = {"search": dataclasses.asdict(search), "device": "auto", "precision": precision}
    with mlflow.start_run(run_id=run_id):
        return mlflow.pyfunc.log_model(
            name=NAME, python_model=ChampionModel(), artifacts={MODEL_FILE: str(model_file)},
            model_config=config, signature=SIGNATURE, input_example=example,
            pip_requirements=requirements(), metadata=metadata)
