"""`zeroloop gtp` over its real command line: a scripted GTP session, and
whole games against GnuGo, each engine driving the other over GTP."""

import subprocess
import sys

import numpy as np
import pytest

from services import ZEROLOOP
from zeroloop.engine.games import make_game
from zeroloop.engine.gtp_client import GtpEngine, GtpError, find_gnugo, gnugo_command


@pytest.mark.slow
def test_a_scripted_session_answers_every_command_and_survives_bad_input():
    script = "\n".join([
        "1 protocol_version", "name", "known_command genmove", "known_command fly", "list_commands",
        "boardsize 7", "komi 6.5", "play black D4", "play white D4", "play b Z9", "play purple C3",
        "play w I3", "frobnicate", "2 genmove white", "play b D4", "undo", "undo", "final_score",
        "boardsize 30", "showboard", "# a comment line", "3 quit", "name"]) + "\n"
    out = subprocess.run([*ZEROLOOP, "gtp", "--game", "go-7", "--model", "random", "--sims", "8"],
                         input=script,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    answers = out.stdout.split("\n\n")
    assert answers[-1] == ""  # every answer ends with an empty line
    answers = answers[:-1]
    assert answers[:4] == ["=1 2", "= zeroloop", "= true", "= false"]
    assert set(answers[4].removeprefix("= ").splitlines()) >= {"genmove", "play", "undo", "final_score"}
    assert answers[5:8] == ["=", "=", "="]
    assert answers[8] == "? illegal move: D4 is occupied"
    assert answers[9].startswith("? invalid vertex") and "off the 7x7 board" in answers[9]
    assert answers[10] == "? invalid color 'purple': black or white"
    assert answers[11].startswith("? invalid vertex") and "no I column" in answers[11]
    assert answers[12] == "? unknown command"
    move = answers[13].removeprefix("=2 ")
    game = make_game("go-7")
    assert game.parse_action(move) != game.parse_action("D4")  # a legal move of White's
    assert answers[14] == "? illegal move: D4 is occupied"
    assert answers[15:17] == ["=", "="]  # White's move, then Black's D4
    assert answers[17] == "= W+6.5"  # the empty board again: komi alone
    assert answers[18] == "? unacceptable size"
    assert "A  B  C  D  E  F  G" in answers[19] and "X to move" in answers[19]
    assert answers[20] == "=3" and len(answers) == 21  # nothing is read after quit


@pytest.mark.slow
def test_a_trained_size_is_kept_and_a_bad_model_is_one_line(tmp_path):
    import torch

    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline.data.storage import save_model

    game = make_game("go-5")
    torch.manual_seed(0)
    model = tmp_path / "go5.pt"
    save_model(model, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)), game)
    out = subprocess.run([*ZEROLOOP, "gtp", "--game", "go-5", "--model", str(model), "--sims", "4"],
                         input="boardsize 9\nboardsize 5\ngenmove b\nquit\n", capture_output=True, text=True,
                         timeout=120)
    answers = out.stdout.split("\n\n")
    assert answers[0] == "? unacceptable size: the model plays 5x5" and answers[1] == "="
    assert answers[2].startswith("= ")
    bad = subprocess.run([*ZEROLOOP, "gtp", "--game", "go-7", "--model", str(model)], input="quit\n",
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "model is for 'go-5', not 'go-7'" in bad.stderr
    assert subprocess.run([*ZEROLOOP, "gtp", "--game", "connect4"], capture_output=True, text=True,
                          timeout=120).returncode == 2


def _play(black: GtpEngine, white: GtpEngine, size: int, cap: int) -> list[str]:
    """One game, each engine's genmove played on the other; the moves."""
    for e in (black, white):
        e.send(f"boardsize {size}")
        e.send("clear_board")
        e.send("komi 9")
    moves, passes = [], 0
    engines = [("black", black, white), ("white", white, black)]
    while passes < 2 and len(moves) < cap:
        colour, mover, other = engines[len(moves) % 2]
        move = mover.send(f"genmove {colour}")
        if move.lower() == "resign":
            break
        other.send(f"play {colour} {move}")
        moves.append(move)
        passes = passes + 1 if move.lower() == "pass" else 0
    return moves


@pytest.mark.slow
def test_whole_games_against_gnugo_over_gtp():
    """zeroloop's engine (an untrained net, 8 simulations) and GnuGo level 1
    on 7x7, each colour once: every move one engine makes the other accepts
    as legal, to the end of the game; our score of the end is the rules'."""
    if find_gnugo() is None:
        pytest.fail("GnuGo is not installed: `make gnugo` installs Debian's package (/usr/games/gnugo)")
    game = make_game("go-7")
    cmd = [*ZEROLOOP, "gtp", "--game", "go-7", "--model", "random", "--sims", "8"]
    for ours_black in (True, False):
        with GtpEngine(cmd, name="zeroloop") as ours, GtpEngine(gnugo_command(1, seed=1)) as gnugo:
            black, white = (ours, gnugo) if ours_black else (gnugo, ours)
            moves = _play(black, white, 7, cap=game.max_moves)
            assert len(moves) > 10
            state = game.play(game.parse_moves(" ".join(moves)))
            lead = game.score(state)
            expected = "0" if lead == 0 else f"{'B' if lead > 0 else 'W'}+{abs(lead):g}"
            assert ours.send("final_score") == expected
            assert state.outcome is not None  # two passes (or the move cap) ended it
            with pytest.raises(GtpError, match="the game is over"):
                ours.send("genmove black")



def _a_repeating_move(game, seed=0):
    """A position of a seeded random game and an empty point whose stone
    would be no suicide but would repeat an earlier board (ko or superko)."""
    rng = np.random.default_rng(seed)
    while True:
        s = game.initial_state()
        while s.outcome is None:
            for a in range(game.pass_action):
                after = None if (s.me | s.opp) & game.cell_bits[a] else game._play_stone(s.me, s.opp,
                                                                                       game.cell_bits[a])
                if after is not None and game._boards(s, *after) in s.seen:
                    return s, a
            legal = np.flatnonzero(game.legal_mask(s))
            s = game.apply(s, int(legal[rng.integers(len(legal))]))


def test_an_engine_move_that_repeats_a_position_is_taken_back_and_passed(tmp_path):
    """GnuGo forbids only the immediate ko recapture, so in rare positions
    (one ended the 7x7 run's evaluation of generation 11) it answers a move
    that repeats an earlier board. GtpPlayer takes it back (``undo``) and
    passes. A scripted GTP peer stands in for GnuGo: it answers ``genmove``
    with the one move given, which real GnuGo does not do on cue."""

    from zeroloop.engine.gtp_client import GtpPlayer

    game = make_game("go-7")
    state, repeat = _a_repeating_move(game)
    assert not game.legal_mask(state)[repeat]
    legal = int(np.flatnonzero(game.legal_mask(state)[:game.pass_action])[0])

    def engine(move):
        script = tmp_path / f"answers_{move}.py"
        script.write_text(
            "import sys\n"
            "undone = 0\n"
            "for line in sys.stdin:\n"
            "    cmd = line.split()\n"
            "    if cmd and cmd[0] == 'undo': undone += 1\n"
            f"    answer = {game.format_action(move)!r} if cmd and cmd[0] == 'genmove' else ''\n"
            "    answer = str(undone) if cmd and cmd[0] == 'undone' else answer\n"
            "    print(f'= {answer}\\n', flush=True)\n"
            "    if cmd and cmd[0] == 'quit': break\n")
        return GtpPlayer(game, [sys.executable, str(script)], "scripted")

    plays = engine(legal)
    assert plays.choose([0], [state]) == [legal] and plays.superko_passes == 0
    plays.close()
    passes = engine(repeat)
    assert passes.choose([0], [state]) == [game.pass_action] and passes.superko_passes == 1
    assert passes._engines[0].send("undone") == "1"  # the engine was told to take its move back
    passes.close()


@pytest.mark.slow
def test_komi_that_is_not_a_finite_score_is_refused_and_the_old_komi_kept():
    """`komi nan`, `komi inf`, `komi 1e400` (inf once read) or a komi larger
    than the board would make every score B+inf or nonsense: each gets a
    ``?`` naming the value, and the komi before it stays."""
    script = "\n".join(["boardsize 7", "komi 6.5", "komi nan", "komi inf", "komi -inf", "komi 1e400",
                        "komi 50", "final_score", "boardsize 9", "komi 81", "boardsize 7", "quit"]) + "\n"
    out = subprocess.run([*ZEROLOOP, "gtp", "--game", "go-7", "--model", "random", "--sims", "4"],
                         input=script,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    answers = out.stdout.split("\n\n")[:-1]
    assert answers[:2] == ["=", "="]
    for text, value in zip(answers[2:7], ("nan", "inf", "-inf", "1e400", "50"), strict=True):
        assert text.startswith(f"? komi {value} ") and "7x7" in text, text
    assert answers[7] == "= W+6.5"  # the 6.5 set before the refused ones
    assert answers[8:10] == ["=", "="]  # 81 points fit a 9x9 board
    assert answers[10].startswith("? unacceptable size: komi 81") and "7x7" in answers[10]
    assert answers[11] == "="


@pytest.mark.slow
def test_handicap_time_and_status_commands_over_the_pipe():
    """The commands GUIs and servers send besides play and genmove: time
    controls (bad ones refused), GTP's fixed handicap where its table has one
    and a ``?`` naming the command where not, free handicap, and the
    engine's judgement of dead stones, with ``kgs-genmove_cleanup`` taking
    them off rather than passing."""
    # Black everywhere but two eyes (A7, C7) and the corner A1, B1, A2, where White's A1 is dead
    open_points = ("A7", "C7", "A1", "B1", "A2")
    black = [f"{c}{r}" for c in "ABCDEFG" for r in range(1, 8) if f"{c}{r}" not in open_points]
    script = "\n".join([
        "list_commands", "known_command lz-analyze", "known_command kgs-genmove_cleanup",
        "time_settings 10 0 0", "time_settings 1 2", "kgs-time_settings fischer 1 2",
        "kgs-time_settings byoyomi 5 1 3",
        "time_left black 4.5 0", "time_left purple 3 0", "time_left white", "kgs-time_settings none",
        "fixed_handicap 2", "boardsize 9", "fixed_handicap 10", "fixed_handicap 3", "fixed_handicap 2",
        "genmove w",
        "clear_board", "set_free_handicap C3 C3", "set_free_handicap Z1 C3", "place_free_handicap 4",
        "boardsize 7", "set_free_handicap " + " ".join(black), "play w A1", "final_status_list dead",
        "final_status_list alive", "final_status_list seki", "final_status_list maybe",
        "kgs-genmove_cleanup b", "quit"]) + "\n"
    out = subprocess.run([*ZEROLOOP, "gtp", "--game", "go-7", "--model", "random", "--sims", "8"],
                         input=script,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    a = out.stdout.split("\n\n")[:-1]
    commands = set(a[0].removeprefix("= ").splitlines())
    assert commands >= {"time_settings", "kgs-time_settings", "time_left", "kgs-genmove_cleanup",
                        "final_status_list", "fixed_handicap", "place_free_handicap", "set_free_handicap",
                        "lz-analyze"}
    assert a[1:4] == ["= true", "= true", "="]
    assert a[4].startswith("? time_settings needs") and a[5].startswith("? kgs-time_settings needs")
    assert a[6:8] == ["=", "="]
    assert a[8].startswith("? invalid color") and a[9].startswith("? time_left needs")
    assert a[10] == "="
    assert a[11].startswith("? fixed_handicap: GTP has no fixed placement on a 7x7 board")
    assert a[12] == "=" and a[13].startswith("? fixed_handicap: invalid number of stones (2 to 9 on 9x9)")
    assert a[14] == "= C3 G7 C7"  # GTP's table, on the third line of a 9x9 board
    assert a[15] == "? fixed_handicap: the board is not empty"
    game = make_game("go-9")
    stones = {game.parse_action(v) for v in ("C3", "G7", "C7")}
    assert game.parse_action(a[16].removeprefix("= ")) not in stones  # White moves next
    assert a[17] == "=" and a[18].startswith("? set_free_handicap: needs at least 2 distinct")
    assert a[19].startswith("? set_free_handicap: invalid vertex")
    assert a[20] == "= C3 G7 C7 G3"
    assert a[21] == "=" and a[22] == "= " + " ".join(black) and a[23] == "="
    assert a[24] == "= A1"  # White's lone stone in Black's corner
    assert "A1" not in a[25] and len(a[25].removeprefix("= ").split()) == len(black)  # Black's one chain
    assert a[26] == "=" and a[27].startswith("? final_status_list needs")
    assert a[28] != "= pass" and a[28].removeprefix("= ") in {"A2", "B1", "A7", "C7"}
    assert a[29] == "="


@pytest.mark.slow
def test_a_whole_game_against_gnugo_on_a_five_second_clock():
    """``time_settings 5 0 0`` (absolute: five seconds for the game), a
    search allowed far more simulations than that buys, and GnuGo level 1
    on 7x7: the controller reports the time left before each move, as
    gogui-twogtp does, and the engine's thinking, timed from this side of
    the pipe, stays inside its clock to the end of the game."""
    if find_gnugo() is None:
        pytest.fail("GnuGo is not installed: `make gnugo` installs Debian's package (/usr/games/gnugo)")
    import time

    main = 5.0
    cmd = [*ZEROLOOP, "gtp", "--game", "go-7", "--model", "random", "--sims", "2000"]
    with GtpEngine(cmd, name="zeroloop") as ours, GtpEngine(gnugo_command(1, seed=1)) as gnugo:
        for e in (ours, gnugo):
            e.send("boardsize 7")
            e.send("clear_board")
            e.send("komi 9")
        ours.send(f"time_settings {main:g} 0 0")
        spent, longest, moves, passes = 0.0, 0.0, [], 0
        while passes < 2 and len(moves) < 3 * 49:
            if len(moves) % 2 == 0:
                ours.send(f"time_left black {main - spent:.3f} 0")
                t0 = time.perf_counter()
                move = ours.send("genmove black")
                took = time.perf_counter() - t0
                spent, longest = spent + took, max(longest, took)
                gnugo.send(f"play black {move}")
            else:
                move = gnugo.send("genmove white")
                if move.lower() == "resign":
                    break
                ours.send(f"play white {move}")
            moves.append(move)
            passes = passes + 1 if move.lower() == "pass" else 0
        assert len(moves) > 10
        assert spent < main, f"{spent:.2f} s over {len(moves)} moves on a {main:g} s clock"
        assert longest > 0.02  # it did spend its clock on searching, not only on one-simulation moves


def _info(line: str) -> list[dict]:
    """An ``lz-analyze`` line's moves: each ``info`` part's keys and values (pv a list)."""
    moves = []
    for part in line.split("info ")[1:]:
        words = part.split()
        pv = words.index("pv")
        entry = dict(zip(words[:pv:2], words[1:pv:2], strict=True))
        entry["pv"] = words[pv + 1:]
        moves.append(entry)
    return moves


@pytest.mark.slow
def test_an_analysis_stream_is_read_live_and_stopped_by_play():
    """``lz-analyze B 10`` answers ``=`` at once, then an ``info`` line
    every tenth of a second in Leela Zero's format (legal moves, visits
    growing, winrate and prior in 1/10000, a principal variation from the
    move); ``play`` stops it: an empty line ends the stream, and ``play`` is
    answered as usual."""
    game = make_game("go-7")
    proc = subprocess.Popen([*ZEROLOOP, "gtp", "--game", "go-7", "--model", "random", "--sims", "8"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        proc.stdin.write("boardsize 7\nplay b D4\nplay w C3\n7 lz-analyze B 10\n")
        proc.stdin.flush()
        assert [proc.stdout.readline() for _ in range(6)] == ["=\n", "\n", "=\n", "\n", "=\n", "\n"]
        assert proc.stdout.readline() == "=7\n"
        state = game.play(game.parse_moves("D4 C3"))
        legal = game.legal_mask(state)
        totals = []
        for _ in range(4):
            moves = _info(proc.stdout.readline())
            assert moves and [int(m["order"]) for m in moves] == list(range(len(moves)))
            for m in moves:
                assert legal[game.parse_action(m["move"])] and m["pv"][0] == m["move"]
                assert 0 <= int(m["winrate"]) <= 10000 and 0 <= int(m["prior"]) <= 10000
            visits = [int(m["visits"]) for m in moves]
            assert visits == sorted(visits, reverse=True)
            totals.append(sum(visits))
        assert totals == sorted(totals) and totals[-1] > totals[0]
        proc.stdin.write("8 play b E5\nshowboard\n")
        proc.stdin.flush()
        rest = []
        while (line := proc.stdout.readline()) != "\n":  # the stream's last info lines, then its end
            assert line.startswith("info move ")
            rest.append(line)
        assert proc.stdout.readline() == "=8\n" and proc.stdout.readline() == "\n"
        board = []
        while (line := proc.stdout.readline()) != "\n":
            board.append(line)
        assert "O to move" in "".join(board)  # E5 was played: White's turn
    finally:
        proc.stdin.write("quit\n")
        proc.stdin.close()
        proc.wait(timeout=30)
