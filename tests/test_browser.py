"""A real browser against `zeroloop serve`: headless Chromium (Debian's
package, which `make test` installs) driven by Playwright plays a whole
tic-tac-toe game by clicking, undoes a move, and steps through a recorded game."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from zeroloop.pipeline.data.catalogue import SHIPPED_DIR

CHROMIUM = os.environ.get("ZEROLOOP_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    (tmp_path / "models").mkdir()
    shutil.copy(SHIPPED_DIR / "tictactoe.pt", tmp_path / "models/champion.pt")
    gen = tmp_path / "reports/generations/gen_1"
    gen.mkdir(parents=True)
    # a recorded gate game: X (gen1) takes the top row
    (gen / "gate_games.json").write_text(json.dumps(
        {"game": "tictactoe", "a": "gen1", "b": "gen0",
         "games": [{"moves": "1 4 2 5 3", "a_first": True, "result": 1.0}]}))
    port = _port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "zeroloop"), "serve", "--port", str(port),
                             "--root", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/api/games", timeout=2).read()
            break
        except OSError:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "zeroloop serve did not start"
            time.sleep(0.2)
    yield url, tmp_path
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def page():
    assert Path(CHROMIUM).exists(), (f"{CHROMIUM} is missing: `make test` installs Debian's chromium "
                                     "(apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        yield page
        browser.close()


def _stones(page) -> int:
    return page.locator("#board .cell[data-stone]").count()


def test_play_a_whole_game_by_clicking(server, page, tmp_path):
    url, _ = server
    page.goto(url)
    page.wait_for_function("document.querySelectorAll('#model-select option').length > 0")
    page.select_option("#game-select", "tictactoe")
    page.wait_for_function("document.querySelector('#model-select option').value === 'champion'")
    page.fill("#sims", "50")
    page.select_option("#side", "first")
    page.click("#new-game")
    status = page.locator("#status")
    page.wait_for_function("document.querySelector('#status').textContent.startsWith('Your move (X)')")
    assert page.locator("#board .cell").count() == 9 and _stones(page) == 0

    clicks = 0
    while True:
        page.wait_for_function("""() => { const t = document.querySelector('#status').textContent;
                                          return t.startsWith('Your move') || t.startsWith('Game over'); }""")
        if status.text_content().startswith("Game over"):
            break
        before = _stones(page)
        page.locator("#board .cell.playable").first.click()
        clicks += 1
        page.wait_for_function(f"document.querySelectorAll('#board .cell[data-stone]').length > {before}")
        if clicks == 2:  # undo once mid-game: the human's move and the AI's reply go
            page.wait_for_function("document.querySelector('#status').textContent.startsWith('Your move')")
            n = _stones(page)
            page.click("#undo")
            page.wait_for_function(f"document.querySelectorAll('#board .cell[data-stone]').length == {n - 2}")
        assert clicks < 12

    text = status.text_content()
    outcome = status.get_attribute("data-outcome")
    assert outcome in ("draw", "the AI wins"), text  # the shipped champion plays perfectly
    assert text == ("Game over: draw." if outcome == "draw" else "Game over: O wins, the AI wins.")
    xs = page.locator("#board .cell[data-stone=X]").count()
    os_ = page.locator("#board .cell[data-stone=O]").count()
    assert xs - os_ in (0, 1) and xs + os_ >= 5
    assert page.locator("#board .cell.playable").count() == 0  # nothing to click after the end
    # the AI's search: its value and visit distribution are shown
    assert "expected score" in page.locator("#ai-value").text_content()
    assert page.locator("#visits tr").count() >= 1
    assert page.locator("#moves").text_content().startswith("Moves: ")
    page.screenshot(path=str(tmp_path / "play.png"), full_page=True)

    page.click("#restart")
    page.wait_for_function("document.querySelector('#status').textContent.startsWith('Your move (X)')")
    assert _stones(page) == 0


def test_step_through_a_recorded_game(server, page):
    url, _ = server
    page.goto(url)
    page.click("#tab-viewer")
    page.wait_for_function("document.querySelectorAll('#record-select option').length > 0")
    page.select_option("#viewer-game", "tictactoe")
    page.wait_for_function("document.querySelector('#record-select').value === 'gate-1'")
    page.click("#record-load")
    page.wait_for_function("document.querySelector('#viewer-title').textContent.includes('X gen1 vs O gen0')")
    assert page.locator("#viewer-board .cell[data-stone]").count() == 0
    for k in range(1, 6):
        page.click("#step-forward")
        assert page.locator("#viewer-board .cell[data-stone]").count() == k
    assert "X wins" in page.locator("#viewer-title").text_content()
    assert "final position: X wins" in page.locator("#frame-info").text_content()
    top_row = [page.locator(f"#viewer-board .cell[data-cell='{i}']").get_attribute("data-stone")
               for i in range(3)]
    assert top_row == ["X", "X", "X"]
    page.click("#step-first")
    assert page.locator("#viewer-board .cell[data-stone]").count() == 0
