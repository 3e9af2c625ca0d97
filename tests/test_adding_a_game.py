"""docs/adding-a-game.md runs: its Python blocks, in order, in one namespace,
print what the page shows after them, and leave a game that passes
check_game and that make_game builds by name."""

from __future__ import annotations

import contextlib
import io
import os
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from zeroloop.engine.games import (
    ENTRY_POINT_GROUP,
    GAME_NAMES,
    check_game,
    make_game,
    unregister_game,
)

PAGE = Path(__file__).resolve().parents[1] / "docs" / "adding-a-game.md"
NAME = "tictactoe5"
#: a fenced block at the start of a line: its language and its text
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def blocks(lang: str) -> list[str]:
    return [code for fence_lang, code in FENCE.findall(PAGE.read_text()) if fence_lang == lang]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """Run the page's Python blocks in a temporary directory: the namespace they
    leave and what each printed, in page order. Unregisters the page's game after."""
    assert NAME not in GAME_NAMES, "the page's game is registered before the page ran"
    text = PAGE.read_text()
    namespace: dict = {"__name__": "adding_a_game"}
    printed: list[tuple[str, str, str | None]] = []  # code, its output, the text block shown after it
    fences = list(FENCE.finditer(text))
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("adding-a-game"))
    try:
        for k, fence in enumerate(fences):
            if fence.group(1) != "python":
                continue
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(fence.group(2), f"{PAGE.name}, block {k}", "exec"), namespace)
            nxt = fences[k + 1] if k + 1 < len(fences) else None
            shown = None
            if nxt is not None and nxt.group(1) == "text" and not text[fence.end():nxt.start()].strip():
                shown = nxt.group(2)
            printed.append((fence.group(2), out.getvalue(), shown))
        yield namespace, printed
    finally:
        os.chdir(cwd)
        if NAME in GAME_NAMES:
            unregister_game(NAME)
    # nothing of the page stays registered for the tests that run after this module
    with pytest.raises(ValueError, match="unknown game"):
        make_game(NAME)


def test_the_page_has_the_steps():
    code = blocks("python")
    assert len(code) >= 8
    # the protocol's members are each written on the page
    for member in ("initial_state", "legal_mask", "def apply", "def encode", "def symmetries",
                   "def transform", "format_action", "parse_action", "format_moves", "parse_moves",
                   "def render", "describe_outcome", "check_game(", "register_game(", "BatchedMCTS("):
        assert any(member in c for c in code), member


def test_the_page_prints_what_it_shows(page):
    _, printed = page
    shown = [(out, text) for _, out, text in printed if text is not None]
    assert len(shown) >= 3
    for out, text in shown:
        assert out == text, f"the page shows\n{text}\nbut the block before it printed\n{out}"


def test_the_page_game_passes_check_game_and_is_made_by_name(page):
    namespace, _ = page
    game_class = namespace["TicTacToe5"]
    report = check_game(game_class(), only_mover_wins=True, rng=1)
    assert report.game == NAME and report.registered and report.symmetries == 8
    game = make_game(NAME)
    assert isinstance(game, game_class)
    assert game.parse_moves("c3 b2") == [12, 16]
    from zeroloop.pipeline.params import parse_params

    assert parse_params({"game": NAME}).game == NAME


def test_the_page_game_plays_like_gomoku_5x5_3(page):
    """The page says the built-in gomoku-5x5-3 is the same game: the same
    moves give the same legal moves, planes, results and notation."""
    namespace, _ = page
    game, ref = namespace["TicTacToe5"](), make_game("gomoku-5x5-3")
    rng = np.random.default_rng(0)
    for _ in range(30):
        s, r, moves = game.initial_state(), ref.initial_state(), []
        while s.outcome is None:
            mask = game.legal_mask(s)
            assert np.array_equal(mask, ref.legal_mask(r))
            a = int(rng.choice(np.flatnonzero(mask)))
            s, r = game.apply(s, a), ref.apply(r, a)
            moves.append(a)
            assert s.outcome == r.outcome
            assert np.array_equal(game.encode([s]), ref.encode([r]))
        assert game.format_moves(moves) == ref.format_moves(moves)
        assert game.render(s).splitlines()[-1] == ref.describe_outcome(r)


def test_the_page_entry_point_names_the_game():
    (snippet,) = blocks("toml")
    entries = tomllib.loads(snippet)["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert list(entries) == [NAME]
    module, _, attr = entries[NAME].partition(":")
    assert module and attr == "TicTacToe5"

