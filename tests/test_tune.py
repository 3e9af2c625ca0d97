"""A tiny real study: tic-tac-toe, sqlite Optuna storage, sqlite MLflow store."""

import optuna
import pytest
import torch
import yaml

import zeroloop.tune as tune
from zeroloop.config import parse_params
from zeroloop.games import make_game
from zeroloop.nn import NetConfig, PolicyValueNet
from zeroloop.storage import save_model
from zeroloop.tracking import StudyTracker

TINY = {"game": "tictactoe", "tune": {"games": 4, "rounds": 2, "simulations": 8, "reference": "random",
                                      "pruner": "none"},
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
    real = tune.search_objective_score
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(tune, "search_objective_score", flaky)
    tracker = StudyTracker.open(params, "t", storage, {"objective": "search"})
    study = tune.run_search_study(params, model=model, trials=3, study_name="t", storage=storage, workers=1,
                                  tracker=tracker)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                      optuna.trial.TrialState.COMPLETE]
    first = study.trials[0]  # the current settings are measured first
    assert first.user_attrs.get("default") and first.params["c_puct"] == params.mcts.c_puct
    assert first.params["temperature_moves"] == params.evaluate.temperature_moves
    assert all(0 <= t.value <= 1 for t in study.trials if t.value is not None)

    # resume: the same name adds trials to the same study in the same storage
    again = tune.run_search_study(params, model=model, trials=1, study_name="t", storage=storage, workers=1,
                                  tracker=StudyTracker.open(params, "t", storage, {}))
    assert len(again.trials) == 4
    assert len(optuna.load_study(study_name="t", storage=storage).trials) == 4

    best = tune.best_params_yaml(again, tmp_path / "best_params.yaml")
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
    s = tune.TrialSettings(c_puct=1.25, temperature=0.0, temperature_moves=0)
    a = tune.search_objective_score(params, model, s, seed=5, workers=1)
    b = tune.search_objective_score(params, model, s, seed=5, workers=1)
    assert a == b


def test_tune_ranges_are_validated():
    from zeroloop.config import ParamsError

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
    tune.parallel_search_study(str(params_file), model=model, trials=3, study_name="p", storage=storage,
                               seed=0, jobs=2)
    study = optuna.load_study(study_name="p", storage=tune.open_storage(storage))
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    from mlflow.tracking import MlflowClient

    runs = MlflowClient().search_runs([MlflowClient().get_experiment_by_name("tune-test").experiment_id])
    assert len([r for r in runs if "mlflow.parentRunId" not in r.data.tags]) == 1
    assert len([r for r in runs if "mlflow.parentRunId" in r.data.tags]) == 3
    with pytest.raises(ValueError, match="journal"):
        tune.parallel_search_study(str(params_file), model=model, trials=2, study_name="p",
                                   storage=f"sqlite:///{tmp_path / 'x.db'}", seed=0, jobs=2)


def test_selfplay_objective_trains_per_trial_and_reports_each_generation(tmp_path, mlflow_db, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    params = parse_params({**TINY, "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                           "mcts": {"simulations": 8}, "selfplay": {"shard_games": 4},
                           "train": {"epochs": 1, "batch_size": 16},
                           "tune": {**TINY["tune"], "selfplay_generations": 2, "selfplay_games": 4}})
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = tune.run_search_study(params, model=None, trials=3, study_name="s", storage=storage, workers=1,
                                  tracker=StudyTracker.open(params, "s", storage, {}), objective="selfplay")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    for t in study.trials:
        assert sorted(t.intermediate_values) == [1, 2]  # one report per generation
        assert t.value == t.intermediate_values[2]
    best = tune.best_params_yaml(study, tmp_path / "best.yaml")
    assert set(best["params"]) == {"mcts.c_puct", "selfplay.temperature", "selfplay.temperature_moves"}
