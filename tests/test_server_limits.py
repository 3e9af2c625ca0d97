"""A real `zeroloop serve` under load and hostile requests (localhost only,
bounded in requests and time): searches are bounded and cancellable, idle
games hold no search tree, bodies and echoes are capped, errors are documented."""

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from services import ZEROLOOP

# the module's tests share the servers its fixtures start once: they run in one test process
pytestmark = pytest.mark.xdist_group("server_limits")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    port = _free_port()
    # a new interpreter, not a fork of the warm server (services.ZEROLOOP): the memory test reads this
    # process's own size
    proc = subprocess.Popen([str(Path(sys.executable).parent / "zeroloop"), "serve", "--port", str(port),
                             "--root", str(root), "--device", "cpu", "--max-searches", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/api/games", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError(f"server did not start: {proc.stderr.read()[-2000:]}")
    yield url, proc
    proc.terminate()
    proc.wait(timeout=20)


def _session(url, game="connect4", sims=20000, human_first=False):
    body = {"game": game, "model": "shipped" if game == "connect4" else None, "sims": sims,
            "human_first": human_first}
    r = httpx.post(f"{url}/api/sessions", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.mark.slow
def test_a_burst_of_searches_is_bounded_and_a_disconnect_cancels(server):
    url, _ = server
    sids = [_session(url) for _ in range(10)]
    answers: dict[str, object] = {}
    retry_after: dict[str, str | None] = {}

    def ask(sid):
        try:  # 20000 simulations take far longer than this client waits: it disconnects
            r = httpx.post(f"{url}/api/sessions/{sid}/ai", timeout=2.0)
            answers[sid] = r.status_code
            retry_after[sid] = r.headers.get("retry-after")
        except httpx.TimeoutException:
            answers[sid] = "gave up"

    threads = [threading.Thread(target=ask, args=(s,)) for s in sids]
    for t in threads:
        t.start()
    time.sleep(0.5)
    t0 = time.time()
    assert httpx.get(f"{url}/api/games", timeout=5).status_code == 200
    assert time.time() - t0 < 2.0, "the API stalls while searches run"
    for t in threads:
        t.join(timeout=10)
    busy = [s for s, a in answers.items() if a == 503]
    gave_up = [s for s, a in answers.items() if a == "gave up"]
    assert len(gave_up) == 2 and len(busy) == 8, answers
    # each refusal came while both slots searched, and says when to come back; (asking again
    # after the burst raced the cancelled searches: a freed slot started a 20000-simulation search)
    assert [retry_after[s] for s in busy] == ["1"] * 8
    # the cancelled searches end at their next chunk, free their slots and play no move
    deadline = time.time() + 15
    while time.time() < deadline:
        moves = [httpx.get(f"{url}/api/sessions/{s}", timeout=5).json()["moves"] for s in gave_up]
        quick = _session(url, sims=50)
        r = httpx.post(f"{url}/api/sessions/{quick}/ai", timeout=10)
        if r.status_code == 200:
            break
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    assert moves == [[], []], "a cancelled search must not play its move"


@pytest.mark.slow
def test_idle_games_hold_no_search_tree(server):
    url, proc = server
    before = _rss_mb(proc.pid)
    for _ in range(40):
        _session(url, game="othello", sims=20000, human_first=True)
    grown = _rss_mb(proc.pid) - before
    assert grown < 100, f"40 idle Othello games grew the server by {grown:.0f} MB"


@pytest.mark.slow
def test_bodies_and_echoes_are_capped_and_405_says_what_is_allowed(server):
    url, _ = server
    sid = _session(url, game="tictactoe", sims=10, human_first=True)
    r = httpx.post(f"{url}/api/sessions/{sid}/move", content=b'{"move": "' + b"5" * 100_000 + b'"}',
                   headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 413 and "too large" in r.json()["error"]
    r = httpx.post(f"{url}/api/sessions/{sid}/move", json={"move": "x" * 2000}, timeout=10)
    assert r.status_code == 422 and len(r.text) < 500, r.text[:300]
    r = httpx.get(f"{url}/api/sessions", timeout=10)
    assert r.status_code == 405 and r.headers["allow"] == "POST"


@pytest.mark.slow
def test_the_openapi_document_lists_the_error_responses(server):
    url, _ = server
    paths = httpx.get(f"{url}/openapi.json", timeout=10).json()["paths"]
    move = paths["/api/sessions/{sid}/move"]["post"]["responses"]
    assert {"200", "400", "404", "409", "413", "422"} <= set(move)
    ai = paths["/api/sessions/{sid}/ai"]["post"]["responses"]
    assert {"404", "409", "503"} <= set(ai)




@pytest.mark.slow
def test_schemathesis_finds_no_failure_with_every_check(server, tmp_path):
    """Property-based requests from the OpenAPI document (bounded: 30 examples
    per operation, fixed seed), every check: status codes, content types and
    bodies as documented, schema-violating requests refused, no 5xx."""
    url, _ = server
    out = subprocess.run([str(Path(sys.executable).parent / "schemathesis"), "run", f"{url}/openapi.json",
                          "--checks", "all", "--max-examples", "30", "--seed", "1", "--workers", "1",
                          "--request-timeout", "60"], cwd=tmp_path,  # its cache goes there, not in the repo
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:]
    assert " passed" in out.stdout and "failure" not in out.stdout.split("SUMMARY")[-1]


def _start(root: Path, *extra: str):
    port = _free_port()
    proc = subprocess.Popen([*ZEROLOOP, "serve", "--port", str(port),
                             "--root", str(root), "--device", "cpu", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/api/games", timeout=1).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"server did not start: {proc.stderr.read()[-2000:]}")


@pytest.mark.slow
def test_a_full_server_refuses_new_games_and_never_drops_a_live_one(tmp_path):
    url, proc = _start(tmp_path, "--max-sessions", "5", "--idle-minutes", "0.05")  # idle after 3 s
    try:
        live = [_session(url, game="tictactoe", sims=10, human_first=True) for _ in range(5)]
        r = httpx.post(f"{url}/api/sessions", json={"game": "tictactoe", "sims": 10}, timeout=10)
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1, r.text
        assert "limit" in r.json()["error"]
        for sid in live:  # every game in progress is still there, and playable
            assert httpx.get(f"{url}/api/sessions/{sid}", timeout=10).status_code == 200
        r = httpx.post(f"{url}/api/sessions/{live[0]}/move", json={"move": "5"}, timeout=10)
        assert r.status_code == 200, r.text
        # games untouched for the idle time make room; the one just played stays
        time.sleep(2.0)
        httpx.get(f"{url}/api/sessions/{live[0]}", timeout=10)
        time.sleep(1.5)
        newer = _session(url, game="tictactoe", sims=10, human_first=True)
        assert httpx.get(f"{url}/api/sessions/{newer}", timeout=10).status_code == 200
        assert httpx.get(f"{url}/api/sessions/{live[0]}", timeout=10).status_code == 200
        gone = [s for s in live[1:] if httpx.get(f"{url}/api/sessions/{s}", timeout=10).status_code == 404]
        assert len(gone) == 1  # one idle game made room for one new game, the least recently used
        assert gone == [live[1]]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.slow
def test_while_the_engine_thinks_pollers_get_answers_at_once(server):
    """More pollers than the server has threads (anyio's pool: 40) while one
    game's engine searches 20000 simulations: each answers at once; then the
    thinking request disconnects, which ends the search and plays no move."""
    url, _ = server
    sid = _session(url)
    host, port = url.removeprefix("http://").split(":")
    # the search's request on a socket of its own, so that the test can hang up on it
    thinker = socket.create_connection((host, int(port)), timeout=5)
    thinker.sendall(f"POST /api/sessions/{sid}/ai HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"
                    .encode())
    # the server's first search compiles the numba kernels (about 6 s alone on 2 cores, more while the
    # suite's other worker runs): the wait for it to start allows for that
    deadline = time.time() + 30
    while not httpx.get(f"{url}/api/sessions/{sid}", timeout=5).json()["thinking"]:
        assert time.time() < deadline, "the search never started"
        time.sleep(0.1)
    answers: list[tuple[int, float, bool]] = []

    def poll(i):
        t0 = time.time()
        path = f"/api/sessions/{sid}" if i % 3 else "/api/games"
        r = httpx.get(f"{url}{path}", timeout=15)
        answers.append((r.status_code, time.time() - t0, r.json().get("thinking", True) if i % 3 else True))

    pollers = [threading.Thread(target=poll, args=(i,)) for i in range(60)]
    for t in pollers:
        t.start()
    for t in pollers:
        t.join(timeout=20)
    assert len(answers) == 60 and all(code == 200 for code, _, _ in answers), answers
    assert all(thinking for _, _, thinking in answers)  # the game's state says its engine thinks
    assert max(s for _, s, _ in answers) < 10, "pollers waited on the search"
    r = httpx.post(f"{url}/api/sessions/{sid}/move", json={"move": "4"}, timeout=5)
    assert r.status_code == 409 and "thinking" in r.json()["error"]
    r = httpx.post(f"{url}/api/sessions/{sid}/ai", timeout=5)
    assert r.status_code == 409
    thinker.setblocking(False)
    with pytest.raises(BlockingIOError):  # no answer yet: the pollers really polled a search
        thinker.recv(1)
    moves = len(httpx.get(f"{url}/api/sessions/{sid}", timeout=5).json()["moves"])
    thinker.close()  # hanging up cancels the search
    deadline = time.time() + 5  # a chunk of the search, not the rest of its 20000 simulations
    while (state := httpx.get(f"{url}/api/sessions/{sid}", timeout=5).json())["thinking"]:
        assert time.time() < deadline, "the search went on after its request hung up"
        time.sleep(0.1)
    assert len(state["moves"]) == moves  # and its move was not played
