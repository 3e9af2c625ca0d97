"""End to end: the real `dvc repro` over a tiny tic-tac-toe run in a temporary
git repository, with a real sqlite MLflow store."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from services import ZEROLOOP, venv_path
from zeroloop.pipeline.params import parse_params

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "game": "tictactoe", "seed": 3,
    "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
    "mcts": {"simulations": 8},
    "selfplay": {"games": 8, "shard_games": 4, "temperature_moves": 4},
    "train": {"epochs": 1, "batch_size": 16, "replay_generations": 2},
    "gate": {"games": 4, "simulations": 8, "opening_plies": 1},
    "evaluate": {"games": 4, "simulations": 8, "opening_plies": 1, "uct_playouts": 10,
                 "positions_per_group": 5, "test_positions_per_group": 6},
    # one generation covers every stage; how generations chain in DVC's graph is
    # test_generations_chain_in_dvcs_graph's (an end-to-end generation costs ~25 s)
    "generations": {"1": {"prev": 0}},
    "runtime": {"workers": 1},
    "mlflow": {"experiment": "e2e"},
}


def dvc(repo: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    out = subprocess.run([str(Path(sys.executable).parent / "dvc"), *args], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"dvc {' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture
def repo(tmp_path, mlflow_db):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "dvc.yaml", repo)
    shutil.copytree(ROOT / "src" / "zeroloop", repo / "src" / "zeroloop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    full = parse_params(TINY).to_yaml_data()  # DVC wants every listed key present
    (repo / "params.yaml").write_text(yaml.safe_dump(full, sort_keys=False))
    shutil.move(mlflow_db, repo / "mlflow.db")
    env = dict(os.environ, PATH=venv_path())
    env.pop("MLFLOW_TRACKING_URI", None)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("mlflow.db\nmlartifacts/\n__pycache__/\n")
    dvc(repo, "init", "-q", env=env)
    dvc(repo, "config", "core.analytics", "false", env=env)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    return repo, env


@pytest.mark.slow
def test_dvc_repro_end_to_end(repo, monkeypatch):
    repo, env = repo
    dvc(repo, "repro", env=env)

    for g in (1,):
        assert (repo / f"models/generations/gen_{g}/best.pt").is_file()
        assert list((repo / f"data/gen_{g}").glob("shard_*.zls"))
        gate = json.loads((repo / f"reports/generations/gen_{g}/gate.json").read_text())
        assert gate["games"] == 4 and gate["wins"] + gate["draws"] + gate["losses"] == 4
        assert gate["score"] == pytest.approx((gate["wins"] + gate["draws"] / 2) / 4)
        # the decision follows the score, and the new best is the winner, byte for byte
        assert gate["accepted"] == int(gate["score"] >= 0.55)
        winner = f"gen_{g}/candidate.pt" if gate["accepted"] else f"gen_{g - 1}/best.pt"
        assert ((repo / f"models/generations/gen_{g}/best.pt").read_bytes()
                == (repo / "models/generations" / winner).read_bytes())
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    assert metrics["generations"] == 1 and 0 <= metrics["vs_random"] <= 1
    assert metrics["solver_positions"] == 5
    # the held-out test set: its own positions, none a validation one, measured on the champion only
    assert metrics["test"]["positions"] == 6 and 0 <= metrics["test"]["search_error"] <= 1
    test_report = json.loads((repo / "reports/test.json").read_text())
    assert test_report["set"] == "test" and test_report["solver"]["positions"] == 6
    val_moves = json.loads((repo / "data/positions.json").read_text())["moves"]
    test_moves = json.loads((repo / "data/test_positions.json").read_text())["moves"]
    assert len(test_moves) == 6 and not {tuple(m) for m in val_moves} & {tuple(m) for m in test_moves}
    errors = subprocess.run([*ZEROLOOP, "errors", "champion", "gen0",
                             "--set", "both", "--json"], cwd=repo, env=env, capture_output=True, text=True,
                            timeout=300)
    assert errors.returncode == 0, errors.stderr
    lines = [json.loads(line) for line in errors.stdout.splitlines()]
    measured = [x for x in lines if "paired" not in x]
    paired = [x["paired"] for x in lines if "paired" in x]
    assert [(x["model"], x["set"], x["positions"]) for x in measured] == [
        ("champion", "validation", 5), ("champion", "test", 6),
        ("gen0", "validation", 5), ("gen0", "test", 6)]
    assert measured[1]["search_error_rate"] == metrics["test"]["search_error"]  # what the report measured
    # the untrained gen0 against the champion, position by position: the paired difference is the
    # difference of the rates
    assert [(x["first"], x["second"], x["set"]) for x in paired] == [
        ("champion", "gen0", "validation"), ("champion", "gen0", "test")]
    for pair, a, b in ((paired[0], measured[0], measured[2]), (paired[1], measured[1], measured[3])):
        for key, rate in (("search", "search_error_rate"), ("raw_policy", "policy_error_rate")):
            v = pair["overall"][key]
            assert v["difference"] == pytest.approx(b[rate] - a[rate], abs=1e-3)
            assert v["only_second"] - v["only_first"] == round((b[rate] - a[rate]) * v["positions"])
    # Elo anchored on the rollout-UCT baseline, which the games inform; time of training recorded
    assert metrics["elo_anchor"] == "uct10" and metrics["training_minutes"] > 0
    # where the run's time went: every kind of stage, each the sum of its generations' process times
    split = metrics["wall_s_by_stage"]
    assert list(split) == ["selfplay", "train", "gate", "eval", "test"] and all(v > 0 for v in split.values())
    evals = [json.loads((repo / f"reports/generations/gen_{g}/eval.json").read_text()) for g in (1,)]
    assert split["eval"] == pytest.approx(sum(e["stage_wall_s"] for e in evals), abs=0.05)
    assert all(e["stage_wall_s"] >= e["wall_s"] for e in evals)
    with open(repo / "reports/plots/generations.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["generation"] for r in rows] == ["1"], rows
    assert float(rows[0]["training_minutes"]) > 0 and float(rows[0]["training_cpu_minutes"]) > 0
    assert rows[0]["elo_se"] != ""
    assert (repo / "reports/plots/errors.png").stat().st_size > 1000
    champion = (repo / "models/champion.pt").read_bytes()
    assert champion == (repo / "models/generations/gen_1/best.pt").read_bytes()
    assert (repo / "reports/plots/elo.png").stat().st_size > 1000
    # generation 1 against generation 0's net, the Elo chain's first link, where the gate took it
    # (where it kept generation 0's net, that is the model evaluated, and it has no one to play)
    assert (rows[0]["vs_previous"] != "") == bool(gate["accepted"]), (rows[0], gate)
    # dvc.yaml's plots render, every one (a plot named `error` once made DVC say it "failed to load some")
    shown = dvc(repo, "plots", "show", "-o", str(repo / "dvc_plots"), env=env)
    assert "failed" not in (shown.stdout + shown.stderr).lower(), shown.stdout + shown.stderr
    page = (repo / "dvc_plots" / "index.html").read_text()
    assert all(y in page for y in ("vs_previous", "solver_error", "elo")), page[:500]

    # a model file overwritten by mistake: DVC sees it, restores it from its cache, reruns nothing
    candidate = repo / "models/generations/gen_1/candidate.pt"
    good = candidate.read_bytes()
    candidate.write_text("not a model\n")
    out = dvc(repo, "repro", env=env)
    assert candidate.read_bytes() == good and "Running stage" not in out.stdout, out.stdout[-2000:]

    # the viewer reads the recorded games of this very run
    from zeroloop.apps.records import list_records, load_record

    assert {"selfplay-1", "gate-1"} <= {r["id"] for r in list_records(repo)}
    gate_games = json.loads((repo / "reports/generations/gen_1/gate_games.json").read_text())
    assert len(gate_games["games"]) == 4
    rec = load_record(repo, "gate-1", 3)
    assert len(rec["frames"]) == len(rec["moves"]) + 1 and rec["frames"][-1]["result"] == rec["result"]
    sp = load_record(repo, "selfplay-1", 0)
    assert abs(sum(sp["frames"][0]["shares"].values()) - 1) < 0.05  # the search's visit shares

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    exp = client.get_experiment_by_name("e2e")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.params["game"] == "tictactoe" and parent.data.params["mcts.simulations"] == "8"
    children = {r.data.tags["zeroloop.generation"]: r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"1"}
    for run in children.values():
        logged = set(run.data.metrics)
        assert {"selfplay/games", "gate/score", "eval/vs_random_score", "train/samples"} <= logged
        assert "train/loss_epoch" in logged  # Lightning's MLFlowLogger wrote into this run
    assert parent.data.metrics["test/search_error"] == metrics["test"]["search_error"]
    history = client.get_metric_history(parent.info.run_id, "vs_random")
    assert sorted(m.step for m in history) == [1]
    version = client.get_model_version_by_alias("zeroloop-tictactoe", "champion")
    assert version.run_id == parent.info.run_id
    # ... registered as an MLflow model over the champion's file, with what champions are compared by
    tags, test = version.tags, metrics["test"]
    assert tags["test.search_error"] == str(round(test["search_error"], 4)) and "test.policy_error" in tags
    assert {f"test.{g}.search_error" for g in test.get("groups", {})} <= set(tags)
    assert float(tags["training_minutes"]) == metrics["training_minutes"] and "training_cpu_minutes" in tags
    assert tags["machine"].startswith("network ") and " cores, " in tags["machine"]
    assert tags["git_commit"] == parent.data.tags["mlflow.source.git.commit"]
    assert tags["zeroloop.pipeline_key"] == parent.data.tags["zeroloop.pipeline_key"]
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{repo / 'mlflow.db'}")
    logged = client.get_logged_model(version.source.removeprefix("models:/"))
    assert logged.source_run_id == parent.info.run_id
    served = Path(mlflow.artifacts.download_artifacts(f"{logged.artifact_location}/artifacts/champion.pt"))
    assert served.read_bytes() == champion
    answers = mlflow.pyfunc.load_model("models:/zeroloop-tictactoe@champion").predict(
        pd.DataFrame({"position": ["", "5"]}))
    assert list(answers["position"]) == ["", "5"] and answers["move"][1] in answers["policy"][1]

    # an ablation: a DVC experiment with its own MLflow run, shown side by side with the baseline;
    # it changes only the evaluation, so only the evaluation stages and the report run again
    ran = dvc(repo, "exp", "run", "--temp", "-n", "uct20", "-S", "evaluate.uct_playouts=20", env=env).stdout
    assert "Running stage 'evaluate@1'" in ran and "Running stage 'report'" in ran, ran[-3000:]
    assert "Running stage 'selfplay@" not in ran and "Running stage 'train@" not in ran, ran[-3000:]
    out = subprocess.run([*ZEROLOOP, "experiments"], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")][1:]
    assert "| test search % [95%] | test raw % [95%] |" in out.stdout
    assert rows[0].startswith("| workspace | (baseline) |")
    assert rows[1].startswith("| uct20 | evaluate.uct_playouts=20 |")
    exp_id = exp.experiment_id
    # the experiment ran in DVC's temporary copy under .dvc/tmp/exps/, yet logged to this
    # repository's mlflow.db, as a parent run of its own with its params and summary
    tagged = client.search_runs([exp_id], filter_string="tags.`dvc.exp_name` = 'uct20'")
    assert len(tagged) == 1, [(r.info.run_name, r.data.tags) for r in tagged]
    assert tagged[0].info.run_id != parent.info.run_id and "mlflow.parentRunId" not in tagged[0].data.tags
    assert tagged[0].data.params["evaluate.uct_playouts"] == "20"
    assert "final_vs_random" in tagged[0].data.metrics
    assert "uct20" in dvc(repo, "exp", "show", "--json", env=env).stdout

    again = dvc(repo, "repro", env=env)
    assert "Running stage" not in again.stdout
    status = dvc(repo, "status", env=env)
    assert "up to date" in status.stdout

    # a team shares data and models through a DVC remote (a folder here; S3, SSH, ... the same way):
    # a fresh clone that pulls has every generation's models and data, and nothing left to run
    dvc(repo, "remote", "add", "-d", "shared", str(repo.parent / "dvc-remote"), env=env)
    dvc(repo, "push", env=env)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "run"], cwd=repo,
                   check=True)
    clone = repo.parent / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    assert not (clone / "models/champion.pt").exists()
    dvc(clone, "pull", env=env)
    for g in (0, 1):
        assert ((clone / f"models/generations/gen_{g}/best.pt").read_bytes()
                == (repo / f"models/generations/gen_{g}/best.pt").read_bytes())
    assert sorted(p.name for p in (clone / "data/gen_1").iterdir()) == sorted(
        p.name for p in (repo / "data/gen_1").iterdir())
    assert (clone / "models/champion.pt").read_bytes() == champion
    pulled = dvc(clone, "repro", env=env)
    assert "Running stage" not in pulled.stdout, pulled.stdout[-2000:]
    assert "up to date" in dvc(clone, "status", env=env).stdout


@pytest.mark.slow
def test_generations_chain_in_dvcs_graph(repo):
    """Each generation's stages hang on the one before: its self-play on the
    previous gate's best and the previous replay (Go-Exploit's start positions),
    its training on the previous replay too, its gate and its evaluation (the
    games against the previous best) on the previous best; the report on all
    (DVC's graph, built without running)."""
    repo, env = repo
    three = parse_params({**TINY, "generations": {"1": {"prev": 0}, "2": {"prev": 1}, "3": {"prev": 2}}})
    (repo / "params.yaml").write_text(yaml.safe_dump(three.to_yaml_data(), sort_keys=False))
    dot = dvc(repo, "dag", "--dot", env=env).stdout
    edges = set(re.findall(r'"([^"]+)" -> "([^"]+)";', dot))
    expected = {("init", "selfplay@1"), ("init", "train@1"), ("init", "gate@1"), ("init", "evaluate@1"),
                ("init", "report"),
                ("positions", "test_positions"), ("test_positions", "report")}
    for g in (1, 2, 3):
        expected |= {(f"selfplay@{g}", f"train@{g}"), (f"train@{g}", f"gate@{g}"),
                     (f"gate@{g}", f"evaluate@{g}"), ("positions", f"evaluate@{g}")}
        expected |= {(f"{s}@{g}", "report") for s in ("selfplay", "train", "gate", "evaluate")}
        if g > 1:
            expected |= {(f"gate@{g - 1}", f"selfplay@{g}"), (f"gate@{g - 1}", f"train@{g}"),
                         (f"gate@{g - 1}", f"gate@{g}"), (f"gate@{g - 1}", f"evaluate@{g}"),
                         (f"train@{g - 1}", f"train@{g}"),
                         (f"train@{g - 1}", f"selfplay@{g}")}
    assert edges == expected, sorted(edges ^ expected)


@pytest.mark.slow
def test_any_change_to_params_yaml_is_validated_by_dvc_repro(repo):
    """A key no stage lists (a misspelt section) still stops `dvc repro`, with one line."""
    repo, env = repo
    dvc(repo, "repro", "check_params", env=env)
    with (repo / "params.yaml").open("a") as f:
        f.write("colour: 1\n")
    status = dvc(repo, "status", "check_params", env=env).stdout
    assert "changed" in status and "colour" in status
    out = subprocess.run([str(Path(sys.executable).parent / "dvc"), "repro", "check_params"], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "unknown key 'colour' (allowed: game, seed," in out.stdout + out.stderr


BAD_GENERATIONS = {
    "a key 0": '  "1": {prev: 0}\n  "0": {prev: 0}\n',
    "prev is itself": '  "1": {prev: 0}\n  "2": {prev: 2}\n',
    "no prev": '  "1": {prev: 0}\n  "2": {}\n',
    "a key twice": '  "1": {prev: 0}\n  "2": {prev: 1}\n  "2": {prev: 2}\n',
}


@pytest.mark.parametrize("case", BAD_GENERATIONS)
@pytest.mark.slow
def test_bad_generations_stop_make_repro_with_the_stages_one_line(tmp_path, case):
    """DVC resolves dvc.yaml's foreach over generations before any stage runs,
    so a bad entry would reach the user as DVC's "Same item(s) are defined as
    both a dependency and an output", "Could not find 'item.prev'" or a
    ruamel duplicate-key page: `make repro` runs `zeroloop check` first, which
    says what a stage run by hand says, in one line, and runs no DVC."""
    from zeroloop.pipeline.params import ParamsError, load_params

    shutil.copy(ROOT / "Makefile", tmp_path)
    shutil.copy(ROOT / "dvc.yaml", tmp_path)
    full = parse_params(TINY).to_yaml_data()
    del full["generations"]
    text = yaml.safe_dump(full, sort_keys=False) + "generations:\n" + BAD_GENERATIONS[case]
    (tmp_path / "params.yaml").write_text(text)
    # no DVC repository: were the check to pass, `dvc repro` would fail with a line of its own, not
    # the check's
    out = subprocess.run(["make", "-s", "repro", f"BIN={Path(sys.executable).parent}", "STAMP="],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    lines = [x for x in out.stderr.strip().splitlines() if not x.startswith("make")]  # make's "*** Error 2"
    assert len(lines) == 1, out.stderr  # one line, nothing from DVC
    line = lines[0]
    with pytest.raises(ParamsError) as direct:  # what `python -m zeroloop.pipeline.stages check` prints
        load_params(tmp_path / "params.yaml", complete=True)
    message = str(direct.value).replace(str(tmp_path / "params.yaml"), "params.yaml")
    assert line == f"zeroloop check: error: {message}"
    assert "generations" in line
