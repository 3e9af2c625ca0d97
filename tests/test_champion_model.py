"""The registered champion is an MLflow model a user loads and serves with
MLflow's own tools: ``mlflow.pyfunc.load_model("models:/zeroloop-<game>@champion")``
and ``mlflow models serve`` (tracking/champion_model.py, logged and registered
by ``Tracker.register_champion`` as the report stage does)."""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
import pytest
import torch

from services import BIN, clean_env, free_port
from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.pipeline.data.storage import save_model
from zeroloop.pipeline.params import parse_params
from zeroloop.pipeline.tracking.runs import Tracker

GAMES = ("tictactoe", "connect4")
#: the version tags the test registers (the report's are champion_tags(report))
TAGS = {"training_minutes": "1.5", "test.begin-easy.search_error": "0.1"}


@pytest.fixture(scope="module")
def champions(tmp_path_factory, mlflow_template_db):
    """A tiny champion of each game in :data:`GAMES`, logged and registered
    into a fresh sqlite store: (store URI, {game: (model file, parent run id)})."""
    root = tmp_path_factory.mktemp("champions")
    shutil.copy(mlflow_template_db, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    made = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("DVC_ROOT", str(root))  # the experiment's artifacts under root/mlartifacts
        for name in GAMES:
            game = make_game(name)
            torch.manual_seed(0)
            path = root / f"{name}.pt"
            save_model(path, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)),
                       game)
            p = parse_params({"game": name, "evaluate": {"simulations": 16},
                              "mlflow": {"experiment": "champions"}})
            with Tracker.open(p) as tr:
                tr.log_summary({"final_elo": 12.5})
                version = tr.register_champion(path, {"generation": 3}, TAGS)
            assert version == "1"
            made[name] = (path, tr.parent_id)
        # registering left MLflow's global URI unset: a later default client reads the environment
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'other.db'}")
        assert mlflow.get_tracking_uri() == f"sqlite:///{root / 'other.db'}"
    return uri, made


def test_the_champion_loads_and_answers_positions_in_its_games_notation(champions, monkeypatch):
    import mlflow
    import pandas as pd
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri, made = champions
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    ttt = mlflow.pyfunc.load_model("models:/zeroloop-tictactoe@champion")
    out = ttt.predict(pd.DataFrame({"position": ["", "5 1"]}))
    assert list(out.columns) == ["position", "move", "value", "policy"]
    assert list(out["position"]) == ["", "51"]  # as the game writes it
    assert sorted(out["policy"][1]) == ["2", "3", "4", "6", "7", "8", "9"]  # the legal moves, no others
    assert out["move"][1] in out["policy"][1] and abs(sum(out["policy"][1].values()) - 1) < 1e-3
    assert all(-1 <= v <= 1 for v in out["value"])
    # the search's own count (16, evaluate.simulations), or the one a row asks for
    assert sum(ttt.unwrap_python_model().analyser.analyse("")["visits"].values()) == 16
    few = ttt.predict(pd.DataFrame({"position": ["", "5"], "simulations": [4, 4]}))
    assert list(few["position"]) == ["", "5"] and set(few["move"]) <= set(map(str, range(1, 10)))

    c4 = mlflow.pyfunc.load_model("models:/zeroloop-connect4@champion")
    out = c4.predict(pd.DataFrame({"position": ["4453"], "simulations": [8]}))
    assert out["position"][0] == "4453" and sorted(out["policy"][0]) == list("1234567")
    with pytest.raises(MlflowException, match=r"position 1 '4444444': move 7 \(4\).*; position 2 'x9'"):
        c4.predict(pd.DataFrame({"position": ["44", "4444444", "x9"]}))
    with pytest.raises(MlflowException, match="position 0 '4': simulations=0: must be >= 1"):
        c4.predict(pd.DataFrame({"position": ["4"], "simulations": [0]}))

    client = MlflowClient(uri)
    for name, (path, run_id) in made.items():
        version = client.get_model_version_by_alias(f"zeroloop-{name}", "champion")
        assert version.source.startswith("models:/m-")  # a logged model (MLflow 3)
        logged = client.get_logged_model(version.source.removeprefix("models:/"))
        assert version.run_id == run_id and logged.source_run_id == run_id  # linked to the run that made it
        (named,) = json.loads(logged.tags["mlflow.modelVersions"])  # its page names the version
        assert (named["name"], str(named["version"])) == (f"zeroloop-{name}", "1")
        assert TAGS.items() <= version.tags.items()
        assert "zeroloop.pipeline_key" in version.tags
        assert logged.metrics and logged.metrics[0].key == "final_elo"  # the run's figures, on the model
        # the model file itself is the MLflow model's artifact, byte for byte
        local = Path(mlflow.artifacts.download_artifacts(f"{logged.artifact_location}/artifacts/{path.name}"))
        assert local.read_bytes() == path.read_bytes()


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_mlflow_models_serve_answers_invocations(champions, tmp_path):
    uri, _ = champions
    port = free_port()
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    cmd = [str(BIN / "mlflow"), "models", "serve", "-m", "models:/zeroloop-connect4@champion",
           "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=clean_env(MLFLOW_TRACKING_URI=uri), cwd=tmp_path, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"no model server: {(tmp_path / 'serve.log').read_text()[-3000:]}")
            time.sleep(0.25)
        status, answer = _post(f"{url}/invocations", {"dataframe_records": [
            {"position": "4453", "simulations": 8}, {"position": "", "simulations": 8}]})
        assert status == 200, answer
        first, start = answer["predictions"]
        assert first["position"] == "4453" and first["move"] in first["policy"]
        assert sorted(start["policy"]) == list("1234567") and -1 <= start["value"] <= 1
        status, answer = _post(f"{url}/invocations", {"dataframe_records": [{"position": "44444444"}]})
        assert status == 400 and "position 0 '44444444'" in answer["message"], answer
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()


def test_a_champion_not_logged_costs_a_line_not_the_stage(tmp_path, mlflow_db, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    from zeroloop.pipeline.tracking import champion_model

    def fails(*args, **kwargs):
        raise OSError("disk quota exceeded\nsecond line")

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.delenv("ZEROLOOP_DEBUG", raising=False)
    monkeypatch.setattr(champion_model, "log_champion_model", fails)
    game = make_game("tictactoe")
    save_model(tmp_path / "champion.pt", PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8)), game)
    p = parse_params({"game": "tictactoe", "mlflow": {"experiment": "champions"}})
    with Tracker.open(p) as tr:
        assert tr.register_champion(tmp_path / "champion.pt", {}, {}) is None
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "not logged as an MLflow model" in said[0] and "disk quota exceeded" in said[0]
    assert MlflowClient(f"sqlite:///{mlflow_db}").search_registered_models() == []
