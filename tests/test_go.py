"""Go's rules on hand-built positions, and against GnuGo's own answers."""

from dataclasses import replace

import numpy as np
import pytest

from zeroloop.engine.games import GoState, IllegalMoveError, check_game, make_game


def setup(game, black: str, white: str, *, black_to_move: bool = True):
    """A position with these stones (GTP points), built by real moves: the
    two sides alternate, the one with fewer stones left passes, and a final
    pass puts the wanted side to move. Stones must not be capturable."""
    b, w = game.parse_moves(black), game.parse_moves(white)
    s = game.initial_state()
    while b or w:
        s = game.apply(s, b.pop(0) if b else game.pass_action)
        if b or w:
            s = game.apply(s, w.pop(0) if w else game.pass_action)
    if (s.ply % 2 == 0) != black_to_move:
        s = game.apply(s, game.pass_action)
    return s


def stones(game, s):
    """(black, white) points as sets of GTP names."""
    black, white = (s.me, s.opp) if s.ply % 2 == 0 else (s.opp, s.me)
    occ = game.bits_to_cells([black, white])
    return ({game.format_action(i) for i in np.flatnonzero(occ[0])},
            {game.format_action(i) for i in np.flatnonzero(occ[1])})


def test_names_notation_and_compliance():
    g9 = make_game("go-9")
    assert (g9.rows, g9.num_actions, g9.komi, g9.max_moves) == (9, 82, 7.5, 243)
    assert make_game("go-7").komi == 9.0 and make_game("go-9x9").name == "go-9"
    assert make_game("go-9-komi6.5").komi == 6.5
    assert g9.parse_action("A9") == 0 and g9.parse_action("J1") == 80  # no I column: H, then J
    assert g9.format_action(8) == "J9" and g9.parse_action("pass") == 81 == g9.pass_action
    for bad in ("I5", "K5", "A0", "A10", "Z1"):
        with pytest.raises(IllegalMoveError):
            g9.parse_action(bad)
    check_game(make_game("go-5"), lines=12)
    check_game(make_game("go-7"), lines=3)


def test_a_stone_and_a_chain_are_captured_when_their_last_liberty_is_filled():
    g = make_game("go-5")
    s = setup(g, "C4 B3 D3", "C3")
    s = g.apply(s, g.parse_action("C2"))
    assert stones(g, s) == ({"C4", "B3", "D3", "C2"}, set())
    s = setup(g, "C4 D4 B3 E3 C2", "C3 D3")
    assert g.legal_mask(s)[g.parse_action("D2")]
    s = g.apply(s, g.parse_action("D2"))
    assert stones(g, s)[1] == set()  # both stones of the chain go
    assert s.passes == 0 and len(s.seen) > 1


def test_suicide_is_illegal_unless_the_move_captures():
    g = make_game("go-5")
    s = setup(g, "A2 B1", "", black_to_move=False)
    a1 = g.parse_action("A1")
    assert not g.legal_mask(s)[a1]
    with pytest.raises(IllegalMoveError, match="A1 is suicide"):
        g.apply(s, a1)
    with pytest.raises(IllegalMoveError, match="A2 is occupied"):
        g.apply(s, g.parse_action("A2"))
    # A2 and B1 in atari once White surrounds them: now White's A1 captures, so it is legal
    s = setup(g, "A2 B1", "A3 B2 C1", black_to_move=False)
    s = g.apply(s, a1)
    assert stones(g, s) == (set(), {"A1", "A3", "B2", "C1"})


def test_ko_cannot_be_retaken_at_once_but_can_after_a_move_elsewhere():
    g = make_game("go-5")
    # a ko: Black's D3 has its last liberty at C3, where a White stone would have none of its own
    s = setup(g, "B3 C4 C2 D3", "E3 D4 D2", black_to_move=False)
    s = g.apply(s, g.parse_action("C3"))  # White takes D3
    assert "D3" not in stones(g, s)[0] and "C3" in stones(g, s)[1]
    d3 = g.parse_action("D3")
    assert not g.legal_mask(s)[d3]  # retaking at once recreates the board: superko
    with pytest.raises(IllegalMoveError, match="D3 repeats an earlier position"):
        g.apply(s, d3)
    s = g.apply(s, g.parse_action("A5"))  # a threat elsewhere, answered
    s = g.apply(s, g.parse_action("E5"))
    assert g.legal_mask(s)[d3]
    s = g.apply(s, d3)
    assert "C3" not in stones(g, s)[1]


def test_liberty_and_ko_planes_mark_chains_in_atari_and_the_point_ko_forbids():
    """Planes 10-16: the mover's stones in chains of 1, 2 and 3+ liberties,
    the opponent's likewise, and the point a ko forbids retaking at once."""
    g = make_game("go-5")
    s = setup(g, "B3 C4 C2 D3", "E3 D4 D2", black_to_move=False)  # White to move
    x = g.encode([s])[0].reshape(g.num_planes, -1)
    at = g.parse_action
    mover = {k: {g.format_action(i) for i in np.flatnonzero(x[10 + k])} for k in range(3)}
    other = {k: {g.format_action(i) for i in np.flatnonzero(x[13 + k])} for k in range(3)}
    assert mover == {0: set(), 1: {"E3", "D2", "D4"}, 2: set()}  # White: E3 (E2, E4), D2, D4 have two
    assert other == {0: {"D3"}, 1: set(), 2: {"B3", "C4", "C2"}}  # Black: D3's last liberty is C3
    assert not x[16].any()
    taken = g.apply(s, at("C3"))  # White takes D3: a ko, which Black may not retake at once
    y = g.encode([taken])[0].reshape(g.num_planes, -1)
    assert np.flatnonzero(y[16]).tolist() == [at("D3")] and not g.legal_mask(taken)[at("D3")]
    assert y[13 + 0, at("C3")] == 1  # the taking stone, White's (the opponent now), in atari
    later = g.apply(g.apply(taken, at("A5")), at("E5"))  # after an exchange elsewhere the ko is open
    assert not g.encode([later])[0][16].any() and g.legal_mask(later)[at("D3")]
    # a capture of one stone that is no ko: the taking stone keeps other liberties
    s = setup(g, "C4 B3 D3", "C3")
    assert not g.encode([g.apply(s, at("C2"))])[0][16].any()


def test_positional_superko_refuses_any_earlier_board():
    g = make_game("go-5")
    s = setup(g, "C3", "")
    c4 = g.parse_action("C4")
    after = g.apply(s, c4)
    black, white = stones(g, after)
    # the same move from the same position, but with the resulting board already seen once
    seen = s.seen | {(after.opp, after.me)}  # (black, white) after Black's C4: White is to move there
    again = GoState(s.me, s.opp, s.ply, s.last, None, s.passes, seen)  # no keys: the rules read the boards
    assert not g.legal_mask(again)[c4] and g.legal_mask(s)[c4]
    by_keys = replace(again, keys=s.keys | {g._key(after.opp, after.me)})  # the kernels' path: by its key
    assert not g.legal_mask(by_keys)[c4] and g.legal_mask(by_keys).sum() == g.legal_mask(again).sum() > 1
    with pytest.raises(IllegalMoveError, match="superko"):
        g.apply(by_keys, c4)
    assert (black, white) == ({"C3", "C4"}, set())


@pytest.mark.parametrize("name", ["go-5", "go-7", "go-9"])
def test_the_kernels_play_by_the_same_rules_as_the_python_chains(name):
    """Random games with captures and kos: at every position the numba rules
    (legal moves, the board after a move and its key, the area) and the
    Python ones (a state without keys) agree, and some positions met a
    point that only superko forbids, found by its key."""
    g, rng = make_game(name), np.random.default_rng(7)
    assert g._kernel
    refused_by_superko = 0
    for _ in range(40):
        s = g.initial_state()
        while s.outcome is None:
            plain = replace(s, keys=frozenset())
            mask = g.legal_mask(s)
            assert np.array_equal(mask, g.legal_mask(plain))
            empty = ~mask[:-1] & ~g.bits_to_cells([s.me | s.opp])[0].astype(bool)
            refused_by_superko += sum(g._play_stone(s.me, s.opp, g.cell_bits[a]) is not None
                                      for a in np.flatnonzero(empty))
            legal = np.flatnonzero(mask)
            a = int(legal[rng.integers(len(legal))]) if rng.random() > 0.03 else g.pass_action
            nxt, ref = g.apply(s, a), g.apply(plain, a)
            assert (nxt.me, nxt.opp, nxt.seen, nxt.outcome) == (ref.me, ref.opp, ref.seen, ref.outcome)
            assert nxt.keys == {g._key(b, w) for b, w in nxt.seen} and not ref.keys
            black, white = g._boards(nxt, nxt.me, nxt.opp)
            assert g.area(black, white) == _area_by_bits(g, black, white)
            assert np.array_equal(g.encode([nxt]), _encode_by_bits(g, nxt))
            s = nxt
    assert refused_by_superko > 0


def _encode_by_bits(g, state):
    g._kernel = False
    try:
        return g.encode([state])
    finally:
        g._kernel = True


def _area_by_bits(g, black, white):
    g._kernel = False
    try:
        return g.area(black, white)
    finally:
        g._kernel = True


def test_two_passes_end_the_game_with_area_scoring_and_komi():
    g = make_game("go-5")
    s = setup(g, "C1 C2 C3 C4 C5", "D1 D2 D3 D4 D5")  # Black owns A-C (15), White D-E (10)
    assert g.area(*((s.me, s.opp) if s.ply % 2 == 0 else (s.opp, s.me))) == (15, 10)
    s = g.apply(s, g.pass_action)
    assert s.outcome is None and s.passes == 1
    s = g.apply(s, g.pass_action)
    assert s.passes == 2 and g.score(s) == 15 - 10 - 7.5
    assert s.outcome == (-1.0 if s.ply % 2 == 0 else 1.0)  # White wins by 2.5: -1 for Black to move
    assert "O wins" == g.describe_outcome(s) and "O by 2.5" in g.render(s)
    even = make_game("go-5-komi5")
    s = setup(even, "C1 C2 C3 C4 C5", "D1 D2 D3 D4 D5")
    s = even.apply(even.apply(s, even.pass_action), even.pass_action)
    assert even.score(s) == 0 and s.outcome == 0.0  # integer komi: a draw (jigo) is possible


def test_a_point_touching_both_colours_is_nobodys_and_seki_stones_count():
    g = make_game("go-5-komi0")
    # C3 is empty and touches both colours: dame
    s = setup(g, "A3 B3", "D3 E3")
    black, white = (s.me, s.opp) if s.ply % 2 == 0 else (s.opp, s.me)
    b, w = g.area(black, white)
    assert b + w == 4  # the rest of the board reaches both colours too: nobody's
    s = setup(g, "A1 A2 A3 A4 A5 B5 C5 D5 E5", "")
    black, white = (s.me, s.opp) if s.ply % 2 == 0 else (s.opp, s.me)
    assert g.area(black, white) == (25, 0)


def test_the_move_cap_ends_and_scores_the_game():
    g = make_game("go-3")
    rng = np.random.default_rng(0)
    for _ in range(20):
        s = g.initial_state()
        while s.outcome is None:
            legal = np.flatnonzero(g.legal_mask(s))
            stones_only = [a for a in legal if a != g.pass_action]
            s = g.apply(s, int(rng.choice(stones_only or legal)))
        assert s.ply <= g.max_moves == 27


def _own_eye(game, s, a) -> bool:
    """Whether point ``a`` is empty with only the mover's stones next to it."""
    bit = game.cell_bits[a]
    return not (game._around(bit) & ~s.me)


def _random_game_against_gnugo(size: int, seed: int, every: int):
    """A random game (no move into one's own one-point eye; pass when nothing
    else is left) played on our rules and mirrored to GnuGo; every ``every``
    plies both list the legal moves of the side to move. Returns the number
    of comparisons, the plies, the two final scores, the stones GnuGo
    judges dead and how many moves only superko forbade."""
    from zeroloop.engine.gtp_client import GtpEngine, gnugo_command

    game = make_game(f"go-{size}")
    rng = np.random.default_rng(seed)
    checked, superko = 0, [0]
    with GtpEngine(gnugo_command(1)) as gnugo:
        gnugo.send(f"boardsize {size}")
        gnugo.send("clear_board")
        gnugo.send(f"komi {game.komi}")
        s = game.initial_state()
        while s.outcome is None:
            colour = "black" if s.ply % 2 == 0 else "white"
            mask = game.legal_mask(s)
            if s.ply % every == 0:
                theirs = set(gnugo.send(f"all_legal {colour}").split())
                ours = {game.format_action(a) for a in np.flatnonzero(mask[:-1])}
                assert ours <= theirs, (seed, s.ply, sorted(ours - theirs))
                # GnuGo forbids only the immediate recapture of a ko; positional superko forbids more
                for p in theirs - ours:
                    assert "repeats an earlier position" in game._why_illegal(s, game.parse_action(p))
                    superko[0] += 1
                checked += 1
            moves = [a for a in np.flatnonzero(mask[:-1]) if not _own_eye(game, s, a)]
            a = int(rng.choice(moves)) if moves else game.pass_action
            gnugo.send(f"play {colour} {game.format_action(a)}")
            s = game.apply(s, a)
        dead = gnugo.send("final_status_list dead").split()
        lead = game.score(s)
        ours = "0" if lead == 0 else f"{'B' if lead > 0 else 'W'}+{abs(lead):.1f}"
        return checked, s.ply, ours, gnugo.send("final_score"), dead, superko[0]


@pytest.mark.slow
@pytest.mark.parametrize("size,seeds", [(7, range(5)), (9, range(7))])
def test_legal_moves_and_final_scores_agree_with_gnugo(size, seeds):
    """GnuGo, an engine nobody here wrote, lists the same legal moves as our
    rules throughout random games (captures, suicide and ko included; where
    it allows more, positional superko is why) and
    scores their ends the same under Chinese (area) rules. Only the ends
    where GnuGo judges no stone dead are compared: a random game can stop
    with a stone left in atari (its capture forbidden by superko, which
    GnuGo does not play), and GnuGo then removes it and awards the points
    by its own judgement, where Tromp-Taylor counts the board as it is."""
    from zeroloop.engine.gtp_client import find_gnugo

    if find_gnugo() is None:
        pytest.fail("GnuGo is not installed: `make gnugo` installs Debian's package (/usr/games/gnugo)")
    scored = superko = 0
    for seed in seeds:
        checked, plies, ours, theirs, dead, refused = _random_game_against_gnugo(size, seed, every=3)
        assert checked >= plies // 3 and plies > size * size  # long games: captures and ko fights happen
        superko += refused
        if not dead:
            assert ours == theirs, (size, seed, ours, theirs)
            scored += 1
    assert scored >= 3  # (7x7: 4 of 5 games end with every stone alive; 9x9: 3 of 7)
    assert size != 9 or superko > 0  # the 9x9 games reach a position where only superko forbids a move


@pytest.mark.slow
def test_evaluation_plays_gnugo_and_says_when_it_is_missing(tmp_path, monkeypatch, capsys):
    """evaluate.gnugo_level: the generation's model plays GnuGo (colour-
    balanced, GnuGo over GTP from the opening on), a baseline like UCT in
    eval.json; without GnuGo the evaluation says so in one line and goes on."""
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.evaluation import evaluate_step, positions_step
    from zeroloop.pipeline.generation import init_step
    from zeroloop.pipeline.params import parse_params

    p = parse_params({"game": "go-5", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                      "evaluate": {"games": 4, "simulations": 4, "uct_playouts": 5, "opening_plies": 2,
                                   "gnugo_level": [1, 10, 1]},
                      "runtime": {"workers": 1, "device": "cpu"}})
    layout = Layout(tmp_path)
    init_step(p, layout)
    positions_step(p, layout)  # no perfect player for Go: an empty set
    layout.model(1).parent.mkdir(parents=True, exist_ok=True)
    layout.model(1).write_bytes(layout.model(0).read_bytes())
    result = evaluate_step(p, layout, 1, progress=False)
    g = result["vs_gnugo1"]
    assert g["opponent"] == "gnugo1" and g["wins"] + g["draws"] + g["losses"] == 4
    assert 0 <= g["score"] <= 1 and g["ci95_low"] <= g["score"] <= g["ci95_high"]
    strong = result["vs_gnugo10"]  # each level of the list once, in its order
    assert strong["opponent"] == "gnugo10" and strong["wins"] + strong["draws"] + strong["losses"] == 4
    assert [k for k in result if k.startswith("vs_gnugo")] == ["vs_gnugo1", "vs_gnugo10"]
    monkeypatch.setenv("ZEROLOOP_GNUGO", str(tmp_path / "no-gnugo"))
    capsys.readouterr()
    result = evaluate_step(p, layout, 1, progress=False)
    assert "vs_gnugo1" not in result and "vs_gnugo10" not in result and "vs_uct" in result
    err = capsys.readouterr().err
    assert "GnuGo is not installed, so no games against gnugo1" in err and "against gnugo10" in err


def test_gnugo_levels_take_one_level_or_a_list_and_name_a_bad_one():
    from zeroloop.pipeline.evaluation import gnugo_levels
    from zeroloop.pipeline.params import ParamsError, parse_params

    assert gnugo_levels(0) == [] and gnugo_levels(7) == [7] and gnugo_levels([10, 1, 10]) == [10, 1]
    listed = parse_params({"game": "go-7", "evaluate": {"gnugo_level": [1, 10]}})
    assert listed.evaluate.gnugo_level == [1, 10]
    for bad in (11, [1, 11], [0]):
        with pytest.raises(ParamsError, match="gnugo_level"):
            parse_params({"game": "go-7", "evaluate": {"gnugo_level": bad}})


@pytest.mark.slow
def test_gnugo_as_a_match_player_beats_random_play():
    """GtpPlayer: GnuGo set up on each opening position and told every move,
    in games run side by side; it beats random play every game, as either
    colour, and leaves no engine running."""
    from zeroloop.engine.arena import make_openings, play_games
    from zeroloop.engine.gtp_client import GtpPlayer, gnugo_command
    from zeroloop.engine.players import RandomPlayer

    game = make_game("go-7")
    rng = np.random.default_rng(0)
    gnugo = GtpPlayer(game, gnugo_command(1, seed=0), "gnugo1")
    results = play_games(game, gnugo, RandomPlayer(game, rng), make_openings(game, 2, 3, rng))
    assert len(results) == 6 and {r.a_first for r in results} == {True, False}
    assert all(r.result == 1 for r in results), [(r.a_first, r.result) for r in results]
    assert all(len(r.actions) > 20 for r in results) and not gnugo._engines


def test_history_planes_show_the_positions_before_the_last_moves():
    """Planes 4-9: the mover's and the opponent's stones before each of the
    last three moves, so a capture (and a ko) shows as what changed; the
    evaluators' cache key includes them, so two positions that differ only
    there are never answered alike."""
    from zeroloop.engine.nn.inference import position_key

    g = make_game("go-5")
    assert g.num_planes == 17
    s = setup(g, "C4 B3 D3", "C3")  # Black to move; White's C3 has one liberty, C2
    captured = g.apply(s, g.parse_action("C2"))  # Black captures; White to move
    x = g.encode([captured])[0]
    c3 = g.parse_action("C3")
    assert x[1].reshape(-1)[c3] == 0 and x[0].reshape(-1)[c3] == 0  # gone now
    assert x[4].reshape(-1)[c3] == 1  # one move ago White (to move now) still had it
    # Black's stones before each of the last three moves (C2, White's pass, D3): 3, 3, 2
    assert [int(x[p].sum()) for p in (5, 7, 9)] == [3, 3, 2]
    # the same stones reached another way: equal in planes 0-3, not in the history or the cache key
    other = setup(g, "C4 B3 D3 C2", "", black_to_move=False)
    assert np.array_equal(g.encode([other])[0][:4], x[:4]) and not np.array_equal(g.encode([other])[0], x)
    assert position_key(other) != position_key(captured)
    assert position_key(captured)[:4] == (captured.me, captured.opp, captured.last, captured.ply & 1)


@pytest.mark.slow
def test_gnugo_captures_the_dead_stones_before_it_passes_so_tromp_taylor_scores_play():
    """A player that drops a few stones into GnuGo's area and then passes:
    GnuGo as an opponent (``capture_all_dead``, the default) takes those
    stones off before it passes, so the Tromp-Taylor result of every game is
    GnuGo's own count with no stone left dead. Without the option GnuGo passes
    with dead stones on the board and Tromp-Taylor counts them, the measuring
    error the 7x7 preset's first run met."""
    from zeroloop.engine.arena import make_openings, play_games
    from zeroloop.engine.gtp_client import GtpEngine, GtpPlayer, gnugo_command
    from zeroloop.engine.players import PositionPlayer

    game = make_game("go-7")

    class DropThenPass(PositionPlayer):
        def __init__(self, rng):
            self.rng, self.name = rng, "drop-then-pass"

        def move(self, state):
            stones = int(np.count_nonzero(game.encode([state])[0, :2]))
            if stones >= 16:
                return game.pass_action
            legal = np.flatnonzero(game.legal_mask(state)[:game.pass_action])
            return int(legal[self.rng.integers(len(legal))]) if len(legal) else game.pass_action

    def dead_left(capture_all_dead):
        gnugo = GtpPlayer(game, gnugo_command(1, seed=0, capture_all_dead=capture_all_dead), "gnugo1")
        rng = np.random.default_rng(2)
        results = play_games(game, gnugo, DropThenPass(rng), make_openings(game, 0, 1, rng))
        out = []
        for r in results:
            state = game.play(r.actions)
            assert state.outcome is not None
            with GtpEngine(gnugo_command(10, capture_all_dead=False)) as judge:
                for cmd in ("boardsize 7", "komi 9", "clear_board"):
                    judge.send(cmd)
                for i, a in enumerate(r.actions):
                    judge.send(f"play {'bw'[i % 2]} {game.format_action(a)}")
                dead = judge.send("final_status_list dead").split()
                said = judge.send("final_score")  # "B+40.0", "W+3.0" or "0"
                theirs = 0.0 if said == "0" else (1 if said[0] == "B" else -1) * float(said[2:])
                out.append((len(dead), game.score(state) == theirs))
        return out

    assert all(n == 0 and same for n, same in dead_left(True)), dead_left(True)
    assert any(n > 0 for n, _ in dead_left(False))  # the scenario does catch a GnuGo that leaves them



def test_the_area_counts_the_empty_points_only_one_side_reaches():
    """Go.owned (the area that scores the game and estimates dead stones in
    GTP) gives each side its stones and the empty points only they reach; a
    point that reaches both sides is nobody's."""
    g = make_game("go-5")
    # Black holds column C, White D1-D4 and E5: A-B are Black's, E1-E4 White's, D5 touches both
    end = g.play(g.parse_moves("C1 D1 C2 D2 C3 D3 C4 D4 C5 E5 pass pass"))
    assert end.outcome is not None and g.score(end) == 15 - 9 - 7.5
    black, white = (end.me, end.opp) if end.ply % 2 == 0 else (end.opp, end.me)
    cells = g.bits_to_cells(list(g.owned(black, white))).astype(np.float32)
    black_view = (cells[0] - cells[1]).reshape(g.rows, g.cols)
    expected = np.array([[1, 1, 1, 0, -1]] + [[1, 1, 1, -1, -1]] * 4, np.float32)  # row 0 is the top: D5
    assert np.array_equal(black_view, expected)
