"""``zeroloop match``: a model against GnuGo, UCT, random play or another model."""

import json

import pytest
import torch

from zeroloop.apps.cli import main
from zeroloop.engine.games import make_game
from zeroloop.engine.gtp_client import find_gnugo
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.pipeline.data.storage import save_model


def _project(tmp_path, game_name: str):
    game = make_game(game_name)
    (tmp_path / "params.yaml").write_text(f"game: {game_name}\nruntime: {{device: cpu}}\n")
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        path = tmp_path / f"net{seed}.pt"
        save_model(path, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)), game)
        paths.append(str(path))
    return paths


def _match(tmp_path, *argv):
    return main(["match", *argv, "--params", str(tmp_path / "params.yaml"), "--root", str(tmp_path),
                 "--workers", "1", "--sims", "4"])


@pytest.mark.slow
@pytest.mark.skipif(find_gnugo() is None, reason="needs gnugo (make gnugo)")
def test_a_go_model_plays_gnugo_and_random_play_with_its_interval(tmp_path, capsys):
    net, _ = _project(tmp_path, "go-7")
    assert _match(tmp_path, net, "--against", "gnugo:1", "random", "--games", "4", "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["opponent"] for x in lines] == ["gnugo1", "random"]
    for x in lines:
        assert x["wins"] + x["draws"] + x["losses"] == 4 == x["games"] and x["simulations"] == 4
        assert x["ci95"][0] <= x["score"] <= x["ci95"][1]
    assert lines[0]["losses"] >= 3  # an untrained net against GnuGo


def test_two_models_meet_on_the_same_openings_and_the_text_gives_score_and_elo(tmp_path, capsys):
    """The same seed: the same games for the same pair of models, each way
    round a mirror (A's wins are B's losses)."""
    a, b = _project(tmp_path, "tictactoe")
    assert _match(tmp_path, a, "--against", b, "uct:20", "--games", "6") == 0
    first = capsys.readouterr().out
    assert _match(tmp_path, a, "--against", b, "uct:20", "--games", "6") == 0
    assert capsys.readouterr().out == first
    assert "6 colour-balanced games a match at 4 simulations" in first
    assert f"vs {b}: " in first and "(W-D-L), score " in first and "Elo " in first and "vs uct20: " in first
    assert _match(tmp_path, a, "--against", b, "--games", "6", "--json") == 0
    ab = json.loads(capsys.readouterr().out)
    assert _match(tmp_path, b, "--against", a, "--games", "6", "--json") == 0
    ba = json.loads(capsys.readouterr().out)
    assert (ab["wins"], ab["draws"], ab["losses"]) == (ba["losses"], ba["draws"], ba["wins"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--against", "gnugo:11"], "--against gnugo:11: gnugo takes a level 1-10, as gnugo:10"),
    (["--against", "uct:x"], "--against uct:x: uct takes a number of playouts >= 1, as uct:1000"),
    (["--against", "gnugo:3"], "--against gnugo:3: GnuGo plays Go, not tictactoe"),
    (["--against", "nobody"], "--against nobody: unknown model 'nobody' for tictactoe"),
    (["--against", "random", "--games", "3"], "--games 3: must be even and >= 2"),
])
def test_a_bad_opponent_or_count_is_one_line_naming_it(tmp_path, capsys, argv, message):
    net, _ = _project(tmp_path, "tictactoe")
    assert _match(tmp_path, net, *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"zeroloop match: {message}") and err.count("\n") == 1
