"""A tiny real study: tic-tac-toe, sqlite Optuna storage, sqlite MLflow store."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
import torch
import yaml

import zeroloop.pipeline.tuning.objectives as objectives
import zeroloop.pipeline.tuning.results as results
import zeroloop.pipeline.tuning.study as tstudy
from services import ZEROLOOP
from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.pipeline.data.storage import save_model
from zeroloop.pipeline.params import parse_params
from zeroloop.pipeline.tuning.tracker import StudyTracker

TINY = {"game": "tictactoe", "tune": {"games": 4, "rounds": 2, "simulations": 8, "reference": "random",
                                      "pruner": "none", "confirm_games": 8},
        "mlflow": {"experiment": "tune-test"}}


@pytest.fixture
def setup(tmp_path, mlflow_db, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    game = make_game("tictactoe")
    torch.manual_seed(0)
    model = tmp_path / "model.pt"
    save_model(model, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)), game)
    return parse_params(TINY), str(model), f"sqlite:///{tmp_path / 'optuna.db'}"


def test_study_records_trials_resumes_and_survives_a_failing_trial(setup, tmp_path, monkeypatch):
    params, model, storage = setup
    real = objectives.search_objective_score
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(objectives, "search_objective_score", flaky)
    tracker = StudyTracker.open(params, "t", storage, {"objective": "search"})
    study = tstudy.run_search_study(params, model=model, trials=3, study_name="t", storage=storage, workers=1,
                                  tracker=tracker)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                      optuna.trial.TrialState.COMPLETE]
    first = study.trials[0]  # the current settings are measured first
    assert first.user_attrs.get("default") and first.params["c_puct"] == params.mcts.c_puct
    assert first.params["temperature_moves"] == params.evaluate.temperature_moves
    assert all(0 <= t.value <= 1 for t in study.trials if t.value is not None)

    # resume: the same name adds trials to the same study in the same storage
    again = tstudy.run_search_study(params, model=model, trials=1, study_name="t", storage=storage, workers=1,
                                  tracker=StudyTracker.open(params, "t", storage, {}))
    assert len(again.trials) == 4
    assert len(optuna.load_study(study_name="t", storage=storage).trials) == 4

    best = results.best_params_yaml(again, tmp_path / "best_params.yaml")
    written = yaml.safe_load((tmp_path / "best_params.yaml").read_text())
    assert written == best and written["score"] == round(again.best_value, 4)
    assert written["apply"].startswith("dvc exp run -S mcts.c_puct=")
    assert written["gain"] == pytest.approx(again.best_value - first.value, abs=1e-3)
    low, high = written["gain_ci95"]
    assert low <= written["gain"] <= high
    assert parse_params({"mcts": {"c_puct": written["params"]["mcts.c_puct"]}})  # a valid value

    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    exp = client.get_experiment_by_name("tune-test")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].data.tags["zeroloop.study"] == "t"
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(trials) == 4
    by_state = sorted(r.data.tags["optuna.state"] for r in trials)
    assert by_state == ["COMPLETE", "COMPLETE", "COMPLETE", "FAILED"]
    failed = next(r for r in trials if r.data.tags["optuna.state"] == "FAILED")
    assert "injected failure" in failed.data.tags["error"] and failed.info.status == "FAILED"
    ok = next(r for r in trials if r.data.tags["optuna.state"] == "COMPLETE")
    assert {"c_puct", "temperature", "temperature_moves"} <= set(ok.data.params)
    assert "final_score" in ok.data.metrics
    assert len(client.get_metric_history(ok.info.run_id, "score")) == 2  # one per round


def test_trials_share_openings_so_equal_settings_score_equally(setup):
    params, model, _ = setup
    s = objectives.TrialSettings(c_puct=1.25, temperature=0.0, temperature_moves=0)
    a = objectives.search_objective_score(params, model, s, seed=5, workers=1)
    b = objectives.search_objective_score(params, model, s, seed=5, workers=1)
    assert a == b


def test_tune_ranges_are_validated():
    from zeroloop.pipeline.params import ParamsError

    with pytest.raises(ParamsError, match=r"tune.c_puct: needs low < high"):
        parse_params({"tune": {"c_puct": {"low": 2.0, "high": 1.0}}})
    with pytest.raises(ParamsError, match="unknown key 'tune.cpuct'"):
        parse_params({"tune": {"cpuct": {"low": 1.0, "high": 2.0}}})


def test_parallel_jobs_share_one_study_through_a_journal_file(setup, tmp_path):
    params, model, _ = setup
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(params.to_yaml_data()))
    storage = f"journal:{tmp_path / 'optuna.journal'}"
    StudyTracker.open(params, "p", storage, {})  # the parent run first, as the command does
    tstudy.parallel_search_study(str(params_file), model=model, trials=3, study_name="p", storage=storage,
                               seed=0, jobs=2)
    study = optuna.load_study(study_name="p", storage=tstudy.open_storage(storage))
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert [t.user_attrs["seed"] for t in study.trials] == [0, 0, 0]  # every job plays the same openings
    from mlflow.tracking import MlflowClient

    runs = MlflowClient().search_runs([MlflowClient().get_experiment_by_name("tune-test").experiment_id])
    assert len([r for r in runs if "mlflow.parentRunId" not in r.data.tags]) == 1
    assert len([r for r in runs if "mlflow.parentRunId" in r.data.tags]) == 3
    with pytest.raises(ValueError, match="journal"):
        tstudy.parallel_search_study(str(params_file), model=model, trials=2, study_name="p",
                                   storage=f"sqlite:///{tmp_path / 'x.db'}", seed=0, jobs=2)


def test_selfplay_objective_trains_per_trial_and_reports_each_generation(tmp_path, mlflow_db, monkeypatch,
                                                                         capfd):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    params = parse_params({**TINY, "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                           "mcts": {"simulations": 8}, "selfplay": {"shard_games": 4},
                           "train": {"epochs": 1, "batch_size": 16},
                           "tune": {**TINY["tune"], "selfplay_generations": 2, "selfplay_games": 4}})
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = tstudy.run_search_study(params, model=None, trials=3, study_name="s", storage=storage, workers=1,
                                  tracker=StudyTracker.open(params, "s", storage, {}), objective="selfplay")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    for t in study.trials:
        assert sorted(t.intermediate_values) == [1, 2]  # one report per generation
        assert t.value == t.intermediate_values[2]
    best = results.best_params_yaml(study, tmp_path / "best.yaml")
    assert set(best["params"]) == {"mcts.c_puct", "selfplay.temperature", "selfplay.temperature_moves"}
    # each trial's training is quiet: no Lightning banner ("GPU available", its tips) per generation
    assert "GPU available" not in capfd.readouterr().err


def test_confirmation_replays_both_settings_on_the_same_fresh_openings(setup):
    params, model, _ = setup
    same = objectives.TrialSettings(c_puct=1.25, temperature=0.0, temperature_moves=0)
    c = results.confirm_gain(params, model, same, same, seed=3, workers=1, progress=False)
    # same settings, same openings, same seeds: every game repeats, so the paired gain is exactly 0
    assert c["games"] == 8 and c["gain"] == 0 and c["gain_ci95"] == [0, 0]
    assert c["best_score"] == c["default_score"]
    other = objectives.TrialSettings(c_puct=4.0, temperature=1.5, temperature_moves=9)
    c = results.confirm_gain(params, model, other, same, seed=3, workers=1, progress=False)
    assert c["gain"] == pytest.approx(c["best_score"] - c["default_score"], abs=1e-3)
    assert c["gain_ci95"][0] <= c["gain"] <= c["gain_ci95"][1]


def test_noise_dims_are_tuned_by_the_selfplay_objective_only():
    space = parse_params({"tune": {"dirichlet_alpha": {"low": 0.1, "high": 2.0, "log": True},
                                   "dirichlet_epsilon": {"low": 0.1, "high": 0.5}}}).tune
    assert objectives.noise_dims(space, "search") == []
    assert objectives.noise_dims(space, "selfplay") == ["dirichlet_alpha", "dirichlet_epsilon"]
    study = optuna.create_study()
    trial = study.ask()
    s = objectives.suggest(trial, space, "selfplay")
    assert 0.1 <= s.dirichlet_alpha <= 2.0 and 0.1 <= s.dirichlet_epsilon <= 0.5
    assert set(s.as_params()) == {"c_puct", "temperature", "temperature_moves", "dirichlet_alpha",
                                  "dirichlet_epsilon"}
    assert objectives.suggest(study.ask(), space, "search").dirichlet_alpha is None
    from zeroloop.pipeline.params import ParamsError

    with pytest.raises(ParamsError, match="tune.dirichlet_epsilon: .*high <= 1"):
        parse_params({"tune": {"dirichlet_epsilon": {"low": 0.5, "high": 1.5}}})


def _zeroloop_bin() -> str:
    return ZEROLOOP[0]


def _load_trials(storage: str, name: str):
    try:
        return optuna.load_study(study_name=name, storage=tstudy.open_storage(storage)).trials
    except KeyError:  # not created yet
        return []


def _tiny_project(tmp_path, *, confirm_games: int) -> None:
    """A tiny tic-tac-toe model.pt and a params.yaml whose tune section plays 8 games at 16 simulations."""
    game = make_game("tictactoe")
    torch.manual_seed(0)
    save_model(tmp_path / "model.pt", PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8,
                                                                               value_hidden=8)), game)
    data = parse_params({**TINY, "tune": {**TINY["tune"], "games": 8, "simulations": 16,
                                          "confirm_games": confirm_games}}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))


@pytest.mark.slow
def test_tune_command_survives_ctrl_c_and_resumes(tmp_path, mlflow_db):
    """The documented command end to end: Ctrl-C (SIGINT to the whole process
    group, as a terminal sends it) mid-study, then the same command resumes."""
    _tiny_project(tmp_path, confirm_games=4)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    cmd = [_zeroloop_bin(), "tune", "--model", "model.pt", "--study", "c"]
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    proc = subprocess.Popen([*cmd, "--trials", "500", "--workers", "2"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 180
    while sum(t.state.name == "COMPLETE" for t in _load_trials(storage, "c")) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no trials finished"
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "rerun the same command" in err
    trials = _load_trials(storage, "c")
    assert not [t for t in trials if t.state.name == "RUNNING"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("tune-test").experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.status == "KILLED"

    done = subprocess.run([*cmd, "--trials", "2", "--workers", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(_load_trials(storage, "c")) == len(trials) + 2
    summary = json.loads(done.stdout)
    written = yaml.safe_load((tmp_path / "reports" / "tuning" / "best_params.yaml").read_text())
    assert written == summary["best"] and written["study"] == "c"
    assert ("confirmed" in written) == (written["trial"] != 0)  # trial 0 is the default itself
    assert (tmp_path / "reports" / "tuning" / "history.png").stat().st_size > 0
    runs = client.search_runs([client.get_experiment_by_name("tune-test").experiment_id])
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    assert len([r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]) == len(
        trials) + 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
@pytest.mark.slow
def test_optuna_dashboard_serves_our_storages(tmp_path, kind):
    url = f"sqlite:///{tmp_path / 'optuna.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'o.journal'}"
    study = optuna.create_study(study_name="dash", storage=tstudy.open_storage(url), direction="maximize")
    study.optimize(lambda t: t.suggest_float("c_puct", 0.5, 4.0), n_trials=3)
    # docs/tuning.md's command: the same URL, or the journal file's path
    arg = url if kind == "sqlite" else url.removeprefix("journal:")
    port = _free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "optuna-dashboard"), arg, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    summaries = json.load(r)["study_summaries"]
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "optuna-dashboard did not answer"
                time.sleep(0.3)
        assert [s["study_name"] for s in summaries] == ["dash"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{summaries[0]['study_id']}") as r:
            detail = json.load(r)
        assert len(detail["trials"]) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_wilcoxon_pruner_gets_each_rounds_own_score(setup):
    _, model, storage = setup
    params = parse_params({**TINY, "tune": {**TINY["tune"], "games": 8, "rounds": 4, "pruner": "wilcoxon"}})
    study = tstudy.run_search_study(params, model=model, trials=2, study_name="w", storage=storage, workers=1,
                                  progress=False)
    for t in study.trials:
        if t.state.name == "COMPLETE":
            rounds = [t.intermediate_values[r] for r in range(4)]
            assert all(v in (0.0, 0.25, 0.5, 0.75, 1.0) for v in rounds)  # one pair of games each
            assert t.value == pytest.approx(sum(rounds) / 4)
    with pytest.raises(ValueError, match="wilcoxon"):
        tstudy.run_search_study(params, model=None, trials=1, study_name="w2", storage=storage,
                              objective="selfplay")


@pytest.mark.slow
def test_tune_on_a_fresh_clone_uses_the_shipped_model(tmp_path, mlflow_db):
    data = parse_params({**TINY, "tune": {**TINY["tune"], "confirm_games": 0}}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    out = subprocess.run([_zeroloop_bin(), "tune", "--trials", "1", "--workers", "1"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "tuning shipped model" in out.stderr and "models/tictactoe.pt" in out.stderr
    assert json.loads(out.stdout)["complete"] == 1
    study = optuna.load_study(study_name="tictactoe-search", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert study.user_attrs["model"].endswith("tictactoe.pt")


def test_solver_metric_scores_the_share_of_result_keeping_moves(tmp_path):
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR

    model = str(SHIPPED_DIR / "tictactoe.pt")  # plays perfectly with search (0% errors in its evaluation)
    params = parse_params({**TINY, "tune": {**TINY["tune"], "metric": "solver", "solver_positions": 30,
                                            "rounds": 3, "simulations": 100, "confirm_games": 20}})
    positions = objectives.solver_position_set(params, seed=0)
    assert len(positions.moves) == 30
    reports = []
    greedy = objectives.TrialSettings(c_puct=1.25, temperature=0.0, temperature_moves=0)
    score = objectives.model_score(params, model, greedy, seed=0, positions=positions,
                             report=lambda v, r, rv: reports.append((r, v, rv)))
    assert score == 1.0 and [r for r, _, _ in reports] == [0, 1, 2] and reports[-1][1] == score
    # sampling every move at a high temperature gives results away on positions where the choice matters
    wild = objectives.TrialSettings(c_puct=1.25, temperature=3.0, temperature_moves=9)
    assert objectives.model_score(params, model, wild, seed=0, positions=positions) < 0.9
    c = results.confirm_gain(params, model, greedy, greedy, seed=0, progress=False)
    assert c["positions"] == 20 and c["gain"] == 0 and c["best_score"] == 1.0
    c = results.confirm_gain(params, model, greedy, wild, seed=0, progress=False)
    assert c["gain"] > 0 and c["gain_ci95"][0] <= c["gain"] <= c["gain_ci95"][1]

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = tstudy.run_search_study(params, model=model, trials=2, study_name="s", storage=storage, workers=1,
                                  progress=False)
    assert study.user_attrs["metric"] == "solver" and study.user_attrs["games_per_trial"] == 30
    assert study.trials[0].value == 1.0  # trial 0 is the greedy default
    for t in study.trials:  # each position's result is kept, so trials pair position by position
        assert len(t.user_attrs["correct"]) == 30 and t.user_attrs["correct"].count("1") / 30 == t.value
    assert results.best_params_yaml(study, tmp_path / "b.yaml")["metric"] == "solver"


def test_best_params_pairs_the_best_trial_with_trial_0_position_by_position(tmp_path):
    dist = {"c_puct": optuna.distributions.FloatDistribution(0.5, 4.0),
            "temperature": optuna.distributions.FloatDistribution(0.0, 1.5),
            "temperature_moves": optuna.distributions.IntDistribution(0, 30)}
    default = "1" * 10 + "0" * 10  # right on 10 of 20 positions
    best = "0" + "1" * 17 + "0" * 2  # 18 right: 8 the default got wrong, 1 it got right lost
    study = optuna.create_study(direction="maximize")
    for value, correct, attrs in ((0.5, default, {"default": True}), (0.85, best, {})):
        study.add_trial(optuna.trial.create_trial(
            params={"c_puct": 1.25, "temperature": 0.0, "temperature_moves": 0}, distributions=dist,
            value=value, user_attrs={"correct": correct, **attrs}))
    study.set_user_attr("metric", "validation")
    study.set_user_attr("games_per_trial", 20)
    paired = results.best_params_yaml(study, tmp_path / "b.yaml")["paired"]
    assert paired["positions"] == 20 and paired["gain"] == 0.35
    assert paired["only_best_right"] == 8 and paired["only_default_right"] == 1
    assert paired["gain_ci95"][0] < 0.35 < paired["gain_ci95"][1]
    assert paired["mcnemar_p"] == round(2 * (1 + 9) / 2 ** 9, 4)  # 1 of 9 discordant, two-sided
    # a trial without per-position results (metric match) gets no paired comparison
    study2 = optuna.create_study(direction="maximize")
    study2.add_trial(optuna.trial.create_trial(params={"c_puct": 1.25, "temperature": 0.0,
                                                       "temperature_moves": 0}, distributions=dist,
                                               value=0.5, user_attrs={"default": True}))
    assert "paired" not in results.best_params_yaml(study2, tmp_path / "c.yaml")


def test_solver_metric_needs_a_solver_for_the_game(tmp_path):
    params = parse_params({"game": "gomoku", "tune": {"metric": "solver"}})
    with pytest.raises(ValueError, match="tune.metric: solver needs a perfect player for gomoku"):
        tstudy.run_search_study(params, model="x.pt", trials=1, study_name="g",
                              storage=f"sqlite:///{tmp_path / 'o.db'}")


@pytest.mark.slow
def test_same_study_name_in_two_storages_gets_two_mlflow_parents(tmp_path, mlflow_db):
    from mlflow.tracking import MlflowClient

    data = parse_params({**TINY, "tune": {**TINY["tune"], "confirm_games": 0}}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    for storage in ("sqlite:///a.db", "sqlite:///b.db"):
        out = subprocess.run([_zeroloop_bin(), "tune", "--trials", "1", "--workers", "1", "--study", "same",
                              "--storage", storage], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
    client = MlflowClient(f"sqlite:///{mlflow_db}")
    runs = client.search_runs([client.get_experiment_by_name("tune-test").experiment_id])
    parents = [r for r in runs if r.data.tags.get("zeroloop.study") == "same"]
    assert sorted(r.data.tags["optuna.storage"] for r in parents) == [
        f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"]
    for p in parents:  # each parent holds its own trial 0 only
        kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == p.info.run_id]
        assert [k.info.run_name for k in kids] == ["trial-0"]


@pytest.mark.slow
def test_a_bad_storage_url_is_one_line_and_logs_nothing(tmp_path, mlflow_db):
    from mlflow.tracking import MlflowClient

    data = parse_params(TINY).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    out = subprocess.run([_zeroloop_bin(), "tune", "--trials", "1", "--storage", "bogus://x"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--storage 'bogus://x': cannot open it" in out.stderr
    assert MlflowClient(f"sqlite:///{mlflow_db}").get_experiment_by_name("tune-test") is None
    out = subprocess.run([_zeroloop_bin(), "tune", "--trials", "1"], cwd=tmp_path, capture_output=True,
                         env={**env, "ZEROLOOP_TUNE_HEARTBEAT": "0.5"}, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.strip() == (
        "zeroloop tune: ZEROLOOP_TUNE_HEARTBEAT='0.5': must be a whole number of seconds, at least 1")
    assert MlflowClient(f"sqlite:///{mlflow_db}").get_experiment_by_name("tune-test") is None


def _open_together(storage: str, jobs: int) -> tuple[list, list[str]]:
    """``jobs`` threads that call :func:`tstudy.open_study` on ``storage`` at
    the same moment: the studies they got, and the errors they met."""
    import threading

    start = threading.Barrier(jobs)
    got, errors = [], []

    def job():
        start.wait()
        try:
            got.append(tstudy.open_study("new", storage, first_trial=({"c_puct": 1.5}, {"default": True})))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(repr(exc))

    threads = [threading.Thread(target=job) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return got, errors


def test_jobs_that_open_a_new_database_together_all_get_the_study(tmp_path):
    """Four jobs open the same new sqlite database at once. Optuna creates the
    tables on a storage's first open without a lock: before the fix, some
    job failed on a table or version row another had just made in every
    round. Each must get the one study, with the defaults enqueued once."""
    for round_ in range(3):
        storage = f"sqlite:///{tmp_path / f'optuna{round_}.db'}"
        got, errors = _open_together(storage, 4)
        assert not errors, errors
        assert len(got) == 4
        trials = optuna.load_study(study_name="new", storage=storage).trials
        assert sum(bool(t.user_attrs.get("default")) for t in trials) == 1


def test_a_process_that_finds_the_study_just_created_waits_for_the_creators_first_trial(tmp_path):
    """Two machines start a study together: the one that created it enqueues the
    defaults; the other, arriving between the creation and that enqueue, must
    not enqueue them a second time."""
    import threading

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    creator = optuna.create_study(study_name="race", storage=storage, direction="maximize")
    opened = {}
    loader = threading.Thread(target=lambda: opened.update(
        study=tstudy.open_study("race", storage, first_trial=({"c_puct": 1.5}, {"default": True}))))
    loader.start()
    time.sleep(1.0)  # the loader found the study, with no trial yet
    creator.enqueue_trial({"c_puct": 1.5}, user_attrs={"default": True})
    loader.join(timeout=30)
    trials = opened["study"].trials
    assert sum(bool(t.user_attrs.get("default")) for t in trials) == 1


def test_selfplay_simulations_keep_the_search_budget(tmp_path, mlflow_db, monkeypatch):
    """tune.selfplay_simulations: a dimension of the selfplay objective only; a
    trial's games scale so games x simulations stays the budget, the study
    really trains with them, and best.yaml scales the full run's games alike."""
    space = parse_params({"tune": {"selfplay_simulations": {"low": 16, "high": 256}}}).tune
    study = optuna.create_study()
    s = objectives.suggest(study.ask(), space, "selfplay")
    assert 16 <= s.simulations <= 256 and "simulations" in s.as_params()
    assert objectives.suggest(study.ask(), space, "search").simulations is None
    assert objectives.selfplay_games(100, 32, 64) == 200 and objectives.selfplay_games(100, 128, 64) == 50
    assert objectives.selfplay_games(3, 1000, 8) == 2  # at least one colour-balanced pair
    # a trial that samples the simulations plays games scaled to keep games x simulations
    base = parse_params({"mcts": {"simulations": 64}, "tune": {"selfplay_games": 100}})
    for sims, games in ((32, 200), (128, 50)):
        trial = objectives.trial_params(base, objectives.TrialSettings(1.0, 1.0, 10, simulations=sims), 0, 1)
        assert trial.mcts.simulations == sims and trial.selfplay.games == games
        parse_params(trial.to_yaml_data())  # a valid params file

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    params = parse_params({**TINY, "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                           "mcts": {"simulations": 8}, "selfplay": {"shard_games": 4, "games": 40},
                           "train": {"epochs": 1, "batch_size": 16},
                           "tune": {**TINY["tune"], "selfplay_generations": 1, "selfplay_games": 4,
                                    "selfplay_simulations": {"low": 16, "high": 64}}})
    assert objectives.default_settings(params, "selfplay").simulations == 16  # 8, clipped into the range
    import zeroloop.pipeline.generation as generation

    played = []
    real = generation.selfplay_step

    def counting(p, layout, gen, prev, **kw):
        played.append((p.mcts.simulations, p.selfplay.games))
        return real(p, layout, gen, prev, **kw)

    monkeypatch.setattr(generation, "selfplay_step", counting)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    st = tstudy.run_search_study(params, model=None, trials=2, study_name="sims", storage=storage, workers=1,
                                 objective="selfplay", progress=False)
    assert [t.state for t in st.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert played[0] == (16, 2)  # trial 0: today's settings clipped into the range, 4 x 8 kept
    for (sims, games), t in zip(played, st.trials, strict=True):
        assert sims == t.params["simulations"] and games == objectives.selfplay_games(4, sims, 8)
    best = results.best_params_yaml(st, tmp_path / "best.yaml")
    sims = best["params"]["mcts.simulations"]
    assert best["params"]["selfplay.games"] == objectives.selfplay_games(40, sims, 8)
    # the same search is not the same CPU: a changed game count comes with a note on training's cost
    ratio = best["params"]["selfplay.games"] / 40
    assert f"{ratio:.2g}x the positions to train on" in best["budget_note"]


def test_hyperband_pruner_and_the_validation_metric(tmp_path, monkeypatch):
    """tune.pruner: hyperband is Optuna's; tune.metric: validation scores on
    the pipeline's data/positions.json, and says so when it is missing."""
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.evaluation import positions_step

    model = str(SHIPPED_DIR / "tictactoe.pt")
    params = parse_params({**TINY, "tune": {**TINY["tune"], "metric": "validation", "pruner": "hyperband",
                                            "rounds": 3, "simulations": 50},
                           "evaluate": {"positions_per_group": 12}})
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    with pytest.raises(ValueError, match=r"positions.json, which does not exist yet; `dvc repro positions`"):
        tstudy.run_search_study(params, model=model, trials=1, study_name="v0", storage=storage, workers=1,
                                progress=False)
    ps = positions_step(params, Layout(tmp_path))
    study = tstudy.run_search_study(params, model=model, trials=3, study_name="v", storage=storage, workers=1,
                                    progress=False)
    assert isinstance(study.pruner, optuna.pruners.HyperbandPruner)
    assert study.user_attrs["metric"] == "validation"
    assert study.user_attrs["games_per_trial"] == len(ps.moves) == 12
    default = objectives.default_settings(params, "search")
    assert study.trials[0].value == objectives.model_score(params, model, default, seed=0, positions=ps)
    assert sorted(study.trials[0].intermediate_values) == [0, 1, 2]


def test_timeout_stops_starting_trials_and_a_clipped_default_is_named(setup, tmp_path):
    """``--timeout``: once the time is up no further trial starts, and the
    results are written as after the last trial; current settings outside
    their range are named, since trial 0 then is not what params.yaml runs."""
    from zeroloop.pipeline.tuning.run import tune

    _, model, storage = setup
    data = parse_params({**TINY, "mcts": {"c_puct": 5.0}}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    lines = []
    summary = tune(str(tmp_path / "params.yaml"), objective="search", trials=50, storage=storage,
                   study_name="to", model=model, workers=1, timeout=1e-3, out_dir=tmp_path / "out",
                   log=lines.append)
    assert summary["trials"] == 1 and summary["complete"] == 1
    assert (tmp_path / "out" / "best_params.yaml").is_file()
    clipped = [line for line in lines if "mcts.c_puct 5 is outside tune.c_puct [0.5, 4]" in line]
    assert clipped and "trial 0 plays 4" in clipped[0]
    assert optuna.load_study(study_name="to", storage=storage).trials[0].params["c_puct"] == 4.0
    # within the ranges (params.yaml's defaults), nothing is said
    assert objectives.clipped_defaults(parse_params({}), "selfplay") == []
    assert objectives.clipped_defaults(parse_params({}), "search") == []


@pytest.mark.slow
def test_tune_command_refuses_a_timeout_that_is_not_positive(tmp_path):
    out = subprocess.run([_zeroloop_bin(), "tune", "--timeout", "0"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "--timeout must be a positive number of seconds, not 0" in out.stderr


def test_a_selfplay_trial_that_trained_every_generation_is_never_pruned(tmp_path, mlflow_db, monkeypatch):
    """The pruner may stop a trial between generations, not after its last
    one: by then the budget is spent and the score is the trial's result."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    monkeypatch.setattr(optuna.trial.Trial, "should_prune", lambda self: True)  # a pruner that prunes all
    params = parse_params({**TINY, "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                           "mcts": {"simulations": 8}, "selfplay": {"shard_games": 4},
                           "train": {"epochs": 1, "batch_size": 16},
                           "tune": {**TINY["tune"], "pruner": "median", "selfplay_generations": 2,
                                    "selfplay_games": 4}})
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = tstudy.run_search_study(params, model=None, trials=1, study_name="p", storage=storage, workers=1,
                                    objective="selfplay", progress=False)
    assert study.trials[0].state == optuna.trial.TrialState.PRUNED  # stopped after generation 1 of 2
    assert sorted(study.trials[0].intermediate_values) == [1]
    one = params.model_copy(update={"tune": params.tune.model_copy(update={"selfplay_generations": 1})})
    study = tstudy.run_search_study(one, model=None, trials=1, study_name="q", storage=storage, workers=1,
                                    objective="selfplay", progress=False)
    assert study.trials[0].state == optuna.trial.TrialState.COMPLETE  # its one generation was its last
    assert study.trials[0].value == study.trials[0].intermediate_values[1]


def _storage_url(tmp_path, kind: str) -> str:
    return (f"sqlite:///{tmp_path / 'optuna.db'}" if kind == "sqlite"
            else f"journal:{tmp_path / 'optuna.journal'}")


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_only_trials_whose_process_stopped_beating_are_failed(tmp_path, mlflow_db, monkeypatch, kind):
    """Two RUNNING trials: one whose process beat once and stopped (SIGKILL,
    the OOM killer, a machine gone), one whose process beats on (a parallel
    job, another machine). A resumed study fails the first, ends its MLflow
    run, says so in a line, and leaves the second alone."""
    import threading

    import zeroloop.pipeline.tuning.run as trun

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    monkeypatch.setenv("ZEROLOOP_TUNE_HEARTBEAT", "1")  # a beat a second: silent for 3 s is lost
    url = _storage_url(tmp_path, kind)
    tracker = StudyTracker.open(parse_params(TINY), "h", url, {})
    backend = optuna.storages.get_storage(tstudy.open_storage(url))
    study = optuna.create_study(study_name="h", storage=backend, direction="maximize")
    dead, live = study.ask(), study.ask()
    for t in (dead, live):
        tracker.trial_run(t.number, {"c_puct": 1.0})
    backend.record_heartbeat(dead._trial_id)
    stop = threading.Event()

    def beat():
        while not stop.is_set():
            backend.record_heartbeat(live._trial_id)
            stop.wait(0.5)

    beating = threading.Thread(target=beat)
    beating.start()
    try:
        time.sleep(4.5)  # over the grace of 3 s, as the database's clock (whole seconds in SQLite) reads it
        lines = []
        assert trun.fail_lost_trials(tracker, "h", url, lines.append) == [dead.number]
    finally:
        stop.set()
        beating.join()
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {dead.number: "FAIL", live.number: "RUNNING"}
    assert len(lines) == 1 and f"trial {dead.number}: " in lines[0] and "heartbeat" in lines[0], lines
    runs = tracker.trial_runs()
    assert runs[dead.number].info.status == "FAILED"
    assert runs[dead.number].data.tags["optuna.state"] == "FAILED"
    assert "heartbeat" in runs[dead.number].data.tags["error"]
    assert runs[live.number].info.status == "RUNNING"


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_trial_whose_process_died_before_its_first_beat_is_failed_once_the_grace_is_past(
        tmp_path, mlflow_db, monkeypatch, kind):
    """A process killed between creating its trial and recording the trial's
    first heartbeat leaves a RUNNING trial with no heartbeat at all, which
    Optuna's check passes over: it is failed once it started longer ago than
    the grace period; one that started just now is left alone."""
    import zeroloop.pipeline.tuning.run as trun

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    monkeypatch.setenv("ZEROLOOP_TUNE_HEARTBEAT", "1")  # the grace: 3 s
    url = _storage_url(tmp_path, kind)
    tracker = StudyTracker.open(parse_params(TINY), "n", url, {})
    backend = optuna.storages.get_storage(tstudy.open_storage(url))
    study = optuna.create_study(study_name="n", storage=backend, direction="maximize")
    never = study.ask()
    tracker.trial_run(never.number, {"c_puct": 1.0})
    time.sleep(3.5)
    young = study.ask()
    tracker.trial_run(young.number, {"c_puct": 1.0})
    lines = []
    assert trun.fail_lost_trials(tracker, "n", url, lines.append) == [never.number]
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {never.number: "FAIL", young.number: "RUNNING"}
    assert len(lines) == 1 and f"trial {never.number}: " in lines[0], lines
    assert tracker.trial_runs()[never.number].info.status == "FAILED"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_tune_killed_with_sigkill_has_its_trials_failed_when_it_resumes(tmp_path, mlflow_db, kind):
    """`zeroloop tune` killed with SIGKILL leaves its trial RUNNING (no handler
    runs); the same command, rerun, marks it failed in Optuna and MLflow and
    counts it in the summary, so nothing stays RUNNING for ever."""
    _tiny_project(tmp_path, confirm_games=0)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}", "ZEROLOOP_TUNE_HEARTBEAT": "1"}
    storage = _storage_url(tmp_path, kind)
    cmd = [_zeroloop_bin(), "tune", "--model", "model.pt", "--study", "k", "--storage", storage,
           "--workers", "1"]

    def trials():
        try:
            return optuna.load_study(study_name="k", storage=tstudy.open_storage(storage)).trials
        except KeyError:
            return []

    killed = []
    for _ in range(5):  # a kill that lands between two trials leaves none RUNNING: try again
        proc = subprocess.Popen([*cmd, "--trials", "500"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 180
        while not any(t.state.name == "RUNNING" and t.number > 0 for t in trials()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no trial started"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        killed = [t.number for t in trials() if t.state.name == "RUNNING"]
        if killed:
            break
    assert killed
    time.sleep(3.5)  # past the grace period of a beat a second

    done = subprocess.run([*cmd, "--trials", "1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    after = {t.number: t.state.name for t in trials()}
    assert "RUNNING" not in after.values() and all(after[n] == "FAIL" for n in killed), after
    summary = json.loads(done.stdout)
    assert summary["failed"] == len(killed) == list(after.values()).count("FAIL")
    assert summary["trials"] == summary["complete"] + summary["pruned"] + summary["failed"] == len(after)
    assert all(f"trial {n}: " in done.stderr for n in killed) and "heartbeat" in done.stderr, done.stderr

    from mlflow.tracking import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("tune-test").experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    for n in killed:
        run, = [r for r in runs if r.data.tags.get("optuna.trial") == str(n)]
        assert run.info.status == "FAILED" and run.data.tags["optuna.state"] == "FAILED"


def test_a_trial_killed_after_its_run_ended_but_before_optuna_stored_it_ends_failed_in_both(
        tmp_path, mlflow_db, monkeypatch):
    """The objective ends its MLflow run (COMPLETE) just before Optuna stores the result; a SIGKILL
    in between leaves the run COMPLETE and the trial RUNNING, which the resumed study fails. The run
    must then say FAILED too, with why, so Optuna and MLflow agree (CI once caught this window)."""
    from mlflow.tracking import MlflowClient
    from optuna.distributions import FloatDistribution

    from zeroloop.pipeline.params import Params

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    tracker = StudyTracker.open(Params(), "s", storage, {})
    done, killed = (study.ask({"c_puct": FloatDistribution(0.5, 4.0)}) for _ in range(2))
    for t in (done, killed):
        run = tracker.trial_run(t.number, t.params)
        run.log({"final_score": 0.5}, None)
        run.end("COMPLETE")
    study.tell(done, 0.5)
    study.tell(killed, state=optuna.trial.TrialState.FAIL)  # what fail_stale_trials does

    for t in study.trials:
        tracker.lost(t, "no heartbeat")
    runs = {int(r.data.tags["optuna.trial"]): r
            for r in MlflowClient(f"sqlite:///{mlflow_db}").search_runs([tracker.experiment_id])
            if "optuna.trial" in r.data.tags}
    assert runs[killed.number].info.status == "FAILED"
    assert runs[killed.number].data.tags["optuna.state"] == "FAILED"
    assert "had ended COMPLETE" in runs[killed.number].data.tags["error"]
    assert runs[done.number].info.status == "FINISHED"  # a run that agrees with Optuna is left alone
    assert runs[done.number].data.tags["optuna.state"] == "COMPLETE"
    assert "zeroloop.backfilled" not in runs[done.number].data.tags
