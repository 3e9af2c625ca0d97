"""Play sessions, model discovery and the terminal game."""

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from services import ZEROLOOP
from zeroloop.apps.play import PlayError, new_session, resolve_model
from zeroloop.engine.games import make_game
from zeroloop.pipeline.data.catalogue import SHIPPED_DIR, list_models


def _layout(root: Path) -> None:
    """A pipeline's models/: a tic-tac-toe champion and two generations, plus
    files that must be skipped (another game's, a damaged one)."""
    ttt = SHIPPED_DIR / "tictactoe.pt"
    (root / "models/generations/gen_1").mkdir(parents=True)
    (root / "models/generations/gen_2").mkdir(parents=True)
    (root / "models/generations/gen_10").mkdir(parents=True)
    shutil.copy(ttt, root / "models/champion.pt")
    shutil.copy(ttt, root / "models/generations/gen_1/best.pt")
    shutil.copy(ttt, root / "models/generations/gen_10/best.pt")
    shutil.copy(ttt, root / "models/generations/gen_10/candidate.pt")
    shutil.copy(SHIPPED_DIR / "connect4.pt", root / "models/generations/gen_2/best.pt")  # other game
    raw = bytearray(ttt.read_bytes())
    raw[-5] ^= 0xFF
    (root / "models/generations/gen_1/candidate.pt").write_bytes(bytes(raw))  # damaged


def test_models_are_listed_best_guess_first(tmp_path):
    _layout(tmp_path)
    ids = [m.id for m in list_models(make_game("tictactoe"), tmp_path)]
    assert ids == ["champion", "gen10", "gen10-candidate", "gen1", "shipped", "random"]
    c4 = [m.id for m in list_models(make_game("connect4"), tmp_path)]
    assert c4 == ["gen2", "reference", "shipped", "random"]
    assert [m.id for m in list_models(make_game("othello-6x6"), tmp_path)] == ["random"]


def test_model_resolution_errors_name_the_problem(tmp_path):
    _layout(tmp_path)
    game = make_game("tictactoe")
    assert resolve_model(game, None, tmp_path).id == "champion"
    with pytest.raises(PlayError, match="unknown model 'gen7' for tictactoe; choose one of: champion"):
        resolve_model(game, "gen7", tmp_path)
    with pytest.raises(PlayError, match="model is for 'connect4', not 'tictactoe'"):
        resolve_model(game, str(SHIPPED_DIR / "connect4.pt"), tmp_path)
    with pytest.raises(PlayError, match="checksum mismatch"):
        resolve_model(game, str(tmp_path / "models/generations/gen_1/candidate.pt"), tmp_path)
    with pytest.raises(PlayError, match="no such model file"):
        resolve_model(game, str(tmp_path / "nope.pt"), tmp_path)
    with pytest.raises(PlayError, match="unknown model"):  # the web API takes ids only
        resolve_model(game, str(SHIPPED_DIR / "tictactoe.pt"), tmp_path, allow_paths=False)


def test_session_moves_turns_undo_and_the_end(tmp_path):
    s = new_session("tictactoe", "random", sims=16, root=tmp_path)
    assert s.human_to_move and s.view()["your_turn"]
    with pytest.raises(PlayError, match="it is your turn"):
        s.ai_move()
    with pytest.raises(PlayError, match="nothing to undo"):
        s.undo()
    with pytest.raises(PlayError, match=r"illegal move '0'.*not a cell 1-9"):
        s.human_move("0")
    s.human_move("5")
    with pytest.raises(PlayError, match="AI's turn"):
        s.human_move("1")
    info = s.ai_move()
    assert -1 <= info["value"] <= 1
    assert sum(v["visits"] for v in info["visits"]) == 16
    assert abs(sum(v["share"] for v in info["visits"]) - 1) < 1e-3
    assert info["move"] == info["visits"][0]["move"]  # temperature 0: the most visited
    with pytest.raises(PlayError, match="already occupied"):
        s.human_move(info["move"])
    view = s.view()
    assert view["moves"] == ["5", info["move"]] and view["last_ai"] == info
    s.undo()
    assert s.view()["moves"] == [] and s.human_to_move and s.view()["last_ai"] is None
    # play to the end with the legal moves in order
    while not s.over:
        if s.human_to_move:
            s.human_move(s.view()["legal"][0]["move"])
        else:
            s.ai_move()
    with pytest.raises(PlayError, match="the game is over") as err:
        s.human_move("1")
    assert err.value.status == 409
    assert s.view()["outcome"] in ("you win", "the AI wins", "draw")


def test_ai_first_and_view_of_connect_four_columns(tmp_path):
    s = new_session("connect4", "random", sims=8, human_first=False, root=tmp_path)
    assert not s.human_to_move and s.view()["human"] == "O"
    s.ai_move()
    view = s.view()
    assert view["your_turn"] and view["to_move"] == "O"
    # each legal column fills the lowest empty cell of that column
    game = make_game("connect4")
    for m in view["legal"]:
        col = int(m["move"]) - 1
        below = m["cell"] + game.cols
        assert m["cell"] % game.cols == col
        assert view["cells"][m["cell"]] == 0 and (below >= 42 or view["cells"][below] != 0)


def test_shipped_tictactoe_model_never_loses_to_random_play(tmp_path):
    rng = np.random.default_rng(0)
    for k in range(8):
        s = new_session("tictactoe", "shipped", sims=100, human_first=bool(k % 2), root=tmp_path)
        while not s.over:
            if s.human_to_move:
                legal = s.view()["legal"]
                s.human_move(legal[rng.integers(len(legal))]["move"])
            else:
                s.ai_move()
        assert s.view()["outcome"] != "you win", s.view()["moves"]


def _play(*args, stdin: str, cwd=None):
    return subprocess.run([*ZEROLOOP, "play", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_terminal_game_rejects_bad_input_and_ends_with_the_result():
    # cells 1..9 over and over: occupied ones are refused and the next line is read
    lines = "x\n10\n" + "\n".join(str(c) for c in range(1, 10)) * 2 + "\n"
    out = _play("--game", "tictactoe", "--model", "shipped", "--sims", "50", stdin=lines)
    assert out.returncode == 0, out.stderr
    assert "illegal move 'x'" in out.stdout and "illegal move '10'" in out.stdout
    assert "is already occupied" in out.stdout
    assert "AI plays" in out.stdout and "for the AI" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("Game over:") and ("the AI wins" in last or "draw" in last)


@pytest.mark.slow
def test_terminal_ai_first_undo_and_quit():
    out = _play("--game", "connect4", "--model", "random", "--sims", "8", "--ai-first",
                stdin="hint\n4\nundo\n3\nquit\n")
    assert out.returncode == 1
    text = out.stdout
    assert text.index("AI plays") < text.index("Your move (O)")
    assert "Legal moves: 1 2 3 4 5 6 7" in text and "Took back your last move." in text
    assert text.strip().endswith("Game abandoned.")


@pytest.mark.slow
def test_terminal_bad_arguments():
    out = _play("--game", "chess", stdin="")
    assert out.returncode == 2 and "unknown game 'chess'" in out.stderr
    out = _play("--game", "tictactoe", "--model", "gen3", stdin="")
    assert out.returncode == 2 and "unknown model 'gen3'" in out.stderr
    out = _play("--game", "tictactoe", "--human-first", "--ai-first", stdin="")
    assert out.returncode == 2 and "not allowed with argument" in out.stderr


@pytest.mark.slow
def test_a_model_file_that_is_not_a_model_is_named_as_damaged(tmp_path):
    """gen2's best.pt is text (an editor, a bad copy): `--model gen2` says
    which file it is and that it is damaged, not "unknown model 'gen2'"."""
    (tmp_path / "models/generations/gen_2").mkdir(parents=True)
    (tmp_path / "models/generations/gen_2/best.pt").write_text("not a model\n")
    out = _play("--game", "tictactoe", "--model", "gen2", stdin="", cwd=tmp_path)
    assert out.returncode == 2
    line, = out.stderr.strip().splitlines()
    assert "models/generations/gen_2/best.pt" in line and "damaged" in line, line
    assert "unknown model" not in line
    with pytest.raises(PlayError, match=r"model 'gen1-candidate' is damaged: .*checksum mismatch"):
        _layout(tmp_path / "other")
        resolve_model(make_game("tictactoe"), "gen1-candidate", tmp_path / "other")


def test_a_search_in_chunks_is_the_search_in_one_go_and_can_be_cancelled(tmp_path, monkeypatch):
    import threading

    import zeroloop.apps.play as play

    def ai_info(chunk):
        monkeypatch.setattr(play, "SEARCH_CHUNK", chunk)
        s = new_session("connect4", "shipped", sims=300, human_first=False, root=tmp_path)
        return s.ai_move()

    assert ai_info(7) == ai_info(10_000)  # same visits, value and move
    s = new_session("connect4", "shipped", sims=300, human_first=False, root=tmp_path)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(PlayError, match="cancelled") as err:
        s.ai_move(cancel)
    assert err.value.status == 499 and s.actions == []


def test_the_reference_model_is_the_file_the_models_readme_names():
    """models/reference/connect4.pt is the default run's champion: its sha256 is the one the README gives
    (a retrained file must come with its new figures), and `reference` picks it."""
    path = SHIPPED_DIR / "reference" / "connect4.pt"
    readme = (SHIPPED_DIR / "README.md").read_text()
    stated = re.search(r"`reference/connect4\.pt`.*?sha256 `([0-9a-f]{64})`", readme, re.S)
    assert stated, "src/zeroloop/models/README.md gives the reference model's sha256"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == stated.group(1)
    assert resolve_model(make_game("connect4"), "reference", "/nonexistent").path == str(path)
