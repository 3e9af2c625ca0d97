import io
import json
import subprocess
import sys

import pytest
import torch

from services import PYTHON
from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.pipeline.data.storage import save_model


def run_cli(*args, stdin=""):
    return subprocess.run([*PYTHON, "-m", "zeroloop", *args], input=stdin,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_analyse_answers_good_lines_and_reports_bad_ones():
    lines = ["4453", "", "44444444", "4x8", "1122334", "112233"]
    out = run_cli("analyse", "--game", "connect4", "--sims", "64", stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr
    answers = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(answers) == len(lines)
    good = answers[0]
    assert good["moves"] == "4453"
    assert set(good) >= {"moves", "move", "value", "visits"}
    assert sum(good["visits"].values()) == 64
    assert set(good["visits"]) == set("1234567")
    assert good["move"] == max(good["visits"], key=good["visits"].get)
    assert -1 <= good["value"] <= 1
    assert answers[1]["moves"] == "" and "move" in answers[1]
    assert "column 4 is full" in answers[2]["error"]
    assert "'x'" in answers[3]["error"]
    assert "game is over" in answers[4]["error"]
    assert answers[5]["move"] == "4"  # the win in one is found even with a random net


@pytest.mark.slow
def test_analyse_with_a_model_file(tmp_path):
    game = make_game("tictactoe")
    torch.manual_seed(0)
    path = tmp_path / "ttt.pt"
    save_model(path, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8)), game)
    out = run_cli("analyse", "--game", "tictactoe", "--model", str(path), "--sims", "50",
                  stdin="152\n55\n")
    assert out.returncode == 0, out.stderr
    a, b = (json.loads(x) for x in out.stdout.splitlines())
    assert a["move"] == "3" and sum(a["visits"].values()) == 50
    assert "occupied" in b["error"]


@pytest.mark.slow
def test_analyse_with_a_model_file_of_another_kind(tmp_path):
    """An MLP's model file plays as a resnet's does: nothing to say on the command line."""
    game = make_game("tictactoe")
    torch.manual_seed(0)
    path = tmp_path / "mlp.pt"
    save_model(path, PolicyValueNet.for_game(game, NetConfig(kind="mlp", hidden=16, layers=2)), game)
    out = run_cli("analyse", "--game", "tictactoe", "--model", str(path), "--sims", "50", stdin="152\n")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["move"] == "3" and sum(answer["visits"].values()) == 50


@pytest.mark.slow
def test_analyse_bad_arguments_exit_2_with_a_message(tmp_path):
    out = run_cli("analyse", "--game", "chess")
    assert out.returncode == 2 and "unknown game 'chess'" in out.stderr
    out = run_cli("analyse", "--game", "connect4", "--model", str(tmp_path / "none.pt"))
    assert out.returncode == 2 and "none.pt" in out.stderr
    out = run_cli("analyse", "--game", "connect4", "--sims", "0")
    assert out.returncode == 2 and "--sims" in out.stderr
    path = tmp_path / "c4.pt"
    game = make_game("connect4")
    save_model(path, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8)), game)
    out = run_cli("analyse", "--game", "tictactoe", "--model", str(path))
    assert out.returncode == 2 and "is for 'connect4'" in out.stderr


@pytest.mark.slow
def test_selfplay_command(tmp_path):
    dest = tmp_path / "games.jsonl"
    out = run_cli("selfplay", "--game", "tictactoe", "--games", "3", "--sims", "8",
                  "--workers", "2", "--quiet", "--out", str(dest))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["games"] == 3
    games = [json.loads(x) for x in dest.read_text().splitlines()]
    game = make_game("tictactoe")
    for g in games:
        final = game.play(game.parse_moves(g["moves"]))
        assert final.outcome is not None


@pytest.mark.slow
def test_help_lists_commands():
    out = run_cli("--help")
    assert out.returncode == 0 and "analyse" in out.stdout and "selfplay" in out.stdout


@pytest.mark.slow
def test_bad_arguments_get_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    cases = [
        (["analyse", "--game", "tictactoe", "--sims", "999999999"],
         "mcts.simulations=999999999: must be <= 100000"),
        (["analyse", "--game", "tictactoe", "--model", str(tmp_path)], "is a directory, not a model file"),
        (["analyse", "--game", "tictactoe", "--device", "banana"], "device 'banana': expected auto, cpu"),
        (["play", "--game", "tictactoe", "--device", "banana"], "device 'banana': expected auto, cpu"),
        (["serve", "--port", "99999"], "--port 99999: must be 1-65535"),
    ]
    if not torch.cuda.is_available():
        cases.append((["play", "--game", "tictactoe", "--device", "cuda:7"], "torch sees no CUDA device"))
    # the first through the command as installed; the rest through the same entry point in this
    # process (a process start costs seconds; what they check is the message)
    out = run_cli(*cases[0][0], stdin="\n")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and cases[0][1] in out.stderr, out.stderr[-2000:]
    from zeroloop.apps.cli import main

    for args, expected in cases[1:]:
        monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
        code = main(list(args))
        err = capsys.readouterr().err
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, (args, err[-2000:])


def test_experiments_read_changes_against_a_workspace_that_has_not_run():
    """Ablation arms run with `dvc exp run --temp` in a clone whose workspace
    never ran: the changes are still read against the workspace's params,
    and no arm is called the baseline for being listed first."""
    from zeroloop.apps.experiments import Run, table

    metrics = {"training_minutes": 24.6, "training_cpu_minutes": 46.5, "elo": 352, "elo_se": 99,
               "solver_error": 0.027, "policy_error": 0.068}
    runs = [Run("workspace", "workspace", {"seed": 0, "mcts.c_puct": 1.25}, {}),
            Run("default-s1", "a", {"seed": 1, "mcts.c_puct": 1.25}, metrics),
            Run("cpuct2-s0", "b", {"seed": 0, "mcts.c_puct": 2.0}, metrics)]
    rows = [line for line in table(runs).splitlines() if line.startswith("| ")]
    assert "| training min | training CPU min |" in rows[0]
    assert rows[1].startswith("| default-s1 | seed=1 | 24.6 | 46.5 |")
    assert rows[2].startswith("| cpuct2-s0 | mcts.c_puct=2.0 |")
    assert len(rows) == 3 and not any(r.startswith("| workspace") for r in rows)
