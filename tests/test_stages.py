"""Stage entry points on bad input: one line naming the problem, exit 2, nothing written."""

import subprocess

import pytest
import torch
import yaml

from services import STAGES
from zeroloop.pipeline.params import parse_params


def stage(cwd, *args):
    return subprocess.run([*STAGES, *args], cwd=cwd,
                          capture_output=True,
                          text=True, timeout=300)


def _params(tmp_path, **changes):
    data = parse_params({"game": "tictactoe", **changes}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))


@pytest.mark.slow
def test_unknown_params_key_stops_the_stage_with_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("game: tictactoe\nmcts:\n  cpuct: 2.0\n")
    out = stage(tmp_path, "init")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown key 'mcts.cpuct'" in lines[0] and "c_puct" in lines[0]
    assert not (tmp_path / "models").exists()


@pytest.mark.slow
def test_damaged_model_is_named(tmp_path):
    _params(tmp_path)
    assert stage(tmp_path, "init").returncode == 0
    best = tmp_path / "models/generations/gen_0/best.pt"
    raw = bytearray(best.read_bytes())
    raw[-10] ^= 0xFF
    best.write_bytes(bytes(raw))
    (tmp_path / "models/generations/gen_1").mkdir(parents=True)
    (tmp_path / "models/generations/gen_1/candidate.pt").write_bytes(bytes(raw))
    out = stage(tmp_path, "gate", "--gen", "1", "--prev", "0")
    assert out.returncode == 2
    assert "models/generations/gen_0/best.pt: checksum mismatch" in out.stderr
    assert not (tmp_path / "models/generations/gen_1/best.pt").exists()


@pytest.mark.slow
def test_generation_missing_from_params_is_reported(tmp_path):
    _params(tmp_path)
    out = stage(tmp_path, "evaluate", "--gen", "13")  # the defaults' chain is 1..12
    assert out.returncode == 2 and "generation 13 is not in params.yaml" in out.stderr
    out = stage(tmp_path, "selfplay", "--gen", "1")
    assert out.returncode == 2 and "needs --prev" in out.stderr


def _full(tmp_path, **changes):
    """A complete tiny tic-tac-toe params.yaml (every section written out)."""
    data = parse_params({"game": "tictactoe", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                         "mcts": {"simulations": 4}, "selfplay": {"games": 4, "shard_games": 2},
                         "train": {"epochs": 1, "batch_size": 8},
                         "generations": {"1": {"prev": 0}, "2": {"prev": 1}}, "runtime": {"workers": 1},
                         **changes}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    return data


@pytest.mark.slow
def test_a_missing_section_stops_the_stage_instead_of_falling_back_to_defaults(tmp_path):
    data = _full(tmp_path)
    assert stage(tmp_path, "init").returncode == 0
    del data["selfplay"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    out = stage(tmp_path, "selfplay", "--gen", "1", "--prev", "0")
    assert out.returncode == 2
    assert "params.yaml: section 'selfplay' is missing" in out.stderr
    # nothing played, nothing logged (no MLflow parent left RUNNING)
    assert not (tmp_path / "data/gen_1").exists() and not (tmp_path / "mlflow.db").exists()
    (tmp_path / "params.yaml").write_text("")
    out = stage(tmp_path, "init")
    assert out.returncode == 2 and "params.yaml: empty" in out.stderr


@pytest.mark.slow
def test_prev_must_match_the_generation_chain(tmp_path):
    _full(tmp_path)
    out = stage(tmp_path, "selfplay", "--gen", "2", "--prev", "0")
    assert out.returncode == 2
    assert "--prev 0 does not match params.yaml: generation 2 follows generation 1" in out.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_a_manifest_that_lost_a_shard_entry_is_refused(tmp_path, mlflow_db):
    import json
    import shutil

    _full(tmp_path)
    env_db = {"MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    for args in (["init"], ["selfplay", "--gen", "1", "--prev", "0"]):
        out = subprocess.run([*STAGES, *args], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300,
                             env={**__import__("os").environ, **env_db})
        assert out.returncode == 0, out.stderr
    manifest = tmp_path / "data/gen_1/manifest.json"
    good = manifest.read_text()
    data = json.loads(good)
    data["shards"].pop("shard_00001.zls")
    manifest.write_text(json.dumps(data))
    out = stage(tmp_path, "train", "--gen", "1", "--prev", "0")
    assert out.returncode == 2
    assert ("data/gen_1/manifest.json: lists 1 shards, but 4 games in shards of 2 make 2 "
            "(missing shard_00001.zls)") in out.stderr
    del data["shards"]
    manifest.write_text(json.dumps(data))
    out = stage(tmp_path, "train", "--gen", "1", "--prev", "0")
    assert out.returncode == 2 and "manifest.json: not a self-play manifest" in out.stderr
    assert not (tmp_path / "models/generations/gen_1/candidate.pt").exists()
    shutil.rmtree(tmp_path / "data/gen_1")


@pytest.mark.slow
def test_an_unwritable_output_folder_stops_the_stage_before_any_work(tmp_path):
    _full(tmp_path)
    assert stage(tmp_path, "init").returncode == 0
    (tmp_path / "reports").write_text("not a folder")  # unwritable even for root, unlike a chmod
    out = stage(tmp_path, "selfplay", "--gen", "1", "--prev", "0")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "reports/: cannot write here" in out.stderr and "nothing was run" in out.stderr
    assert not (tmp_path / "data/gen_1").exists() and not (tmp_path / "data/.partial").exists()


@pytest.mark.slow
def test_the_stage_chain_runs_with_an_mlp(tmp_path, mlflow_db):
    """init, self-play (int8 where the CPU has it, as the default precision
    picks), training and the gate with ``net.kind: mlp``: every model file of
    the chain is an MLP's, with its kind in the header."""
    import os

    from zeroloop.engine.nn.net import MLPNet
    from zeroloop.pipeline.data.storage import load_model, read_model_header

    net = {"kind": "mlp", "hidden": 16, "layers": 2, "value_hidden": 8}
    _full(tmp_path, net=net, gate={"games": 2, "simulations": 4, "sprt": {"enabled": False}})
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    for args in (["init"], ["selfplay", "--gen", "1", "--prev", "0"], ["train", "--gen", "1", "--prev", "0"],
                 ["gate", "--gen", "1", "--prev", "0"]):
        out = subprocess.run([*STAGES, *args], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr
        if args == ["init"]:
            assert "random mlp 2x16 network" in out.stdout + out.stderr
    models = tmp_path / "models/generations"
    for path in (models / "gen_0/best.pt", models / "gen_1/candidate.pt", models / "gen_1/best.pt"):
        assert read_model_header(path)["net"] == net
        assert type(load_model(path)[0]) is MLPNet
    trained, _, meta = load_model(models / "gen_1/candidate.pt")
    assert meta["generation"] == 1
    first, _, _ = load_model(models / "gen_0/best.pt")
    pairs = zip(first.state_dict().values(), trained.state_dict().values())
    assert any(not torch.equal(a, b) for a, b in pairs)
