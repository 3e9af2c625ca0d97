"""A real browser against `zeroloop serve`: headless Chromium (Debian's
package, which `make test` installs) driven by Playwright plays a whole
tic-tac-toe game by clicking, undoes a move, and steps through a recorded game.
And against `make ui`: the MLflow UI opens on the pipeline's runs, with their source."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from services import ZEROLOOP
from zeroloop.pipeline.data.catalogue import SHIPPED_DIR

ROOT = Path(__file__).resolve().parents[1]

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
    proc = subprocess.Popen([*ZEROLOOP, "serve", "--port", str(port),
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.fixture
def pipeline_store(tmp_path, mlflow_db, monkeypatch):
    """A git repository with a GitHub remote (a token in its URL) and an MLflow
    store holding a pipeline run and its first generation, logged by the Tracker
    into the experiment the repository's params.yaml names."""
    from zeroloop.pipeline.params import load_params, parse_params
    from zeroloop.pipeline.tracking.runs import Tracker

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "dvc.yaml").write_text("stages: {}\n")
    subprocess.run([*git, "add", "dvc.yaml"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "pipeline"], check=True)
    subprocess.run([*git, "remote", "add", "origin", "https://ci:s3cret@github.com/zeroloop-dev/zeroloop.git"],
                   check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    commit = head.stdout.strip()

    monkeypatch.setenv("DVC_ROOT", str(repo))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    experiment = load_params(ROOT / "params.yaml").mlflow.experiment  # what `make ui` opens
    params = parse_params({"game": "tictactoe", "mlflow": {"experiment": experiment}})
    with Tracker.open(params) as tracker:
        tracker.log_summary({"elo": 120.0, "vs_random": 0.9}, step=1)
        tracker.generation_run_id(1)
    run_name = tracker.client.get_run(tracker.parent_id).info.run_name
    return mlflow_db, run_name, commit


@pytest.fixture
def mlflow_ui(pipeline_store):
    """`make ui` on the store: the URL it prints, once the server answers."""
    db, run_name, commit = pipeline_store
    port = _port()
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_ROOT", "MLFLOW_TRACKING_URI")}
    # -o: never reinstall the venv from a test; BIN: the venv running the tests
    proc = subprocess.Popen(["make", "-s", "-o", ".venv/.installed", "ui", f"UI_PORT={port}",
                             f"UI_STORE=sqlite:///{db}", f"BIN={Path(sys.executable).parent}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    deadline = time.monotonic() + 180  # the server starts in ~20 s on two busy cores
    try:
        while True:
            url = next((w for line in list(lines) if line.startswith("MLflow UI")
                        for w in line.split() if w.startswith("http://")), None)
            if url:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                    break
                except OSError:
                    pass
            assert proc.poll() is None, "".join(lines)[-3000:]
            assert time.monotonic() < deadline, "`make ui` did not start:\n" + "".join(lines)[-3000:]
            time.sleep(0.5)
        yield url, run_name, commit
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make, the server and its workers: the group started here
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.mark.slow
def test_make_ui_opens_on_the_pipeline_runs_with_their_source(mlflow_ui, page, tmp_path):
    """A fresh profile (no workflow type remembered) lands on the runs table in
    Model training mode, not on the GenAI overview; the pipeline run's Source
    names its repository and links to it. Screenshot: test-artifacts/mlflow-ui.png."""
    url, run_name, commit = mlflow_ui
    assert "/runs?" in url and "workflowType=machine_learning" in url
    page.set_viewport_size({"width": 1600, "height": 900})  # the Source column is off-screen at 1200
    page.goto(url)
    try:
        name = page.locator(".ag-row [col-id='attributes.`Run Name`']", has_text=run_name)
        name.wait_for(timeout=60_000)
        page.wait_for_timeout(1000)  # let the page settle for the screenshot
    finally:  # what a user sees, also when the checks below fail
        shot = page.screenshot(path=str(tmp_path / "mlflow-ui.png"))
        (ROOT / "test-artifacts").mkdir(exist_ok=True)
        (ROOT / "test-artifacts/mlflow-ui.png").write_bytes(shot)
    assert page.locator("h2").first.text_content().strip() == "Runs"  # "Training runs" in GenAI mode
    for genai in ("Detect Issues", "Sessions", "Judges"):  # the GenAI overview and its side nav
        assert not page.get_by_text(genai, exact=True).first.is_visible()
    # ag-grid splits a row into its pinned and scrolled parts, one .ag-row each, with the same row-id
    row_id = name.locator("xpath=ancestor::*[contains(@class, 'ag-row')][1]").get_attribute("row-id")
    source = page.locator(f".ag-row[row-id='{row_id}'] [col-id='attributes.`Source`']")
    assert source.inner_text().strip() == "zeroloop"
    assert source.locator("a").get_attribute("href") == "https://github.com/zeroloop-dev/zeroloop"
    assert "s3cret" not in page.content()
    # the commit is in the run's tags, shown on the run page (and the Version column, when chosen)
    name.locator("a", has_text=run_name).click()
    page.get_by_text(commit[:6]).first.wait_for(timeout=30_000)
