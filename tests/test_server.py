"""The JSON API behind `zeroloop serve`: good paths and every kind of bad request."""

import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient

from zeroloop.apps.cli import build_parser
from zeroloop.apps.server import create_app
from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
from zeroloop.pipeline.params import parse_params


@pytest.fixture
def client(tmp_path):
    (tmp_path / "models").mkdir()
    shutil.copy(SHIPPED_DIR / "tictactoe.pt", tmp_path / "models/champion.pt")
    with TestClient(create_app(tmp_path), raise_server_exceptions=False) as c:
        yield c


def new(client, **body):
    r = client.post("/api/sessions", json={"game": "tictactoe", "sims": 30, **body})
    assert r.status_code == 201, r.text
    return r.json()


def test_lists_games_and_models(client):
    games = client.get("/api/games").json()
    assert [g["name"] for g in games][:2] == ["tictactoe", "connect4"]
    c4 = next(g for g in games if g["name"] == "connect4")
    assert (c4["rows"], c4["cols"], c4["click"]) == (6, 7, "column")
    models = client.get("/api/models", params={"game": "tictactoe"}).json()["models"]
    assert [m["id"] for m in models] == ["champion", "shipped", "random"]
    c4_models = client.get("/api/models?game=connect4").json()["models"]
    assert [m["id"] for m in c4_models] == ["reference", "shipped", "random"]


def test_a_whole_game_through_the_api(client):
    s = new(client)
    assert s["your_turn"] and s["model"]["id"] == "champion" and len(s["legal"]) == 9
    sid = s["id"]
    while not s["over"]:
        if s["your_turn"]:
            s = client.post(f"/api/sessions/{sid}/move", json={"move": s["legal"][0]["move"]}).json()
        else:
            s = client.post(f"/api/sessions/{sid}/ai").json()
            ai = s["last_ai"]
            assert -1 <= ai["value"] <= 1 and ai["move"] == ai["visits"][0]["move"]
            assert sum(v["visits"] for v in ai["visits"]) == 30
    assert s["outcome"] in ("the AI wins", "draw") and s["legal"] == []  # the champion is perfect
    assert client.get(f"/api/sessions/{sid}").json()["moves"] == s["moves"]
    undone = client.post(f"/api/sessions/{sid}/undo").json()
    assert not undone["over"] and undone["your_turn"] and len(undone["moves"]) < len(s["moves"])
    fresh = client.post(f"/api/sessions/{sid}/restart").json()
    assert fresh["moves"] == [] and fresh["id"] != sid and fresh["sims"] == 30


def test_ai_first(client):
    s = new(client, human_first=False, model="random")
    assert not s["your_turn"] and s["human"] == "O"
    s = client.post(f"/api/sessions/{s['id']}/ai").json()
    assert s["your_turn"] and len(s["moves"]) == 1


def _error(r, status, text):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and text in body["error"], body
    return body["error"]


def test_bad_requests_get_a_4xx_with_a_message(client):
    sid = new(client)["id"]
    move = f"/api/sessions/{sid}/move"
    _error(client.post(move, json={"move": "0"}), 400, "illegal move '0': '0' is not a cell 1-9")
    _error(client.post(move, json={"move": "e4"}), 400, "illegal move 'e4'")
    _error(client.post(move, json={"move": ""}), 400, "empty move")
    _error(client.post(move, content=b'{"move": ', headers={"content-type": "application/json"}), 422,
           "malformed JSON body")
    _error(client.post(move, json={"mvoe": "5"}), 422, "mvoe: Extra inputs are not permitted")
    _error(client.post(move, json={"move": 5}), 422, "move: Input should be a valid string")
    _error(client.post(move, json=["5"]), 422, "valid dictionary")
    _error(client.post(f"/api/sessions/{sid}/ai"), 409, "it is your turn")
    _error(client.post(f"/api/sessions/{sid}/undo"), 409, "nothing to undo")
    client.post(move, json={"move": "5"})
    _error(client.post(move, json={"move": "1"}), 409, "it is the AI's turn")
    client.post(f"/api/sessions/{sid}/ai")
    s = client.get(f"/api/sessions/{sid}").json()
    taken = next(i + 1 for i, v in enumerate(s["cells"]) if v == 2)
    _error(client.post(move, json={"move": str(taken)}), 400, "already occupied")

    _error(client.post("/api/sessions", json={"game": "chess"}), 404, "unknown game 'chess'; choose one of")
    _error(client.post("/api/sessions", json={"game": "tictactoe", "model": "gen4"}), 404,
           "unknown model 'gen4' for tictactoe; choose one of: champion, shipped, random")
    path = str(SHIPPED_DIR / "tictactoe.pt")
    _error(client.post("/api/sessions", json={"game": "tictactoe", "model": path}),
           404, "unknown model")  # no file paths from the web
    _error(client.post("/api/sessions", json={"game": "tictactoe", "sims": 0}), 422, "sims: Input should be")
    _error(client.post("/api/sessions", json={"sims": 10}), 422, "game: required field is missing")
    _error(client.get("/api/models?game=chess"), 404, "unknown game 'chess'")
    _error(client.get("/api/models"), 422, "game: required field is missing")
    _error(client.post("/api/sessions/nope/move", json={"move": "5"}), 404, "unknown game session 'nope'")
    _error(client.get("/api/records/gate-1"), 404, "no gate games for generation 1")
    _error(client.get("/api/records/whatever"), 404, "unknown record 'whatever'")
    _error(client.get("/api/records?game=chess"), 404, "unknown game")
    _error(client.get("/api/nothing"), 404, "no such page or endpoint: GET /api/nothing")
    _error(client.get(f"/api/sessions/{sid}/move"), 405, "GET is not allowed")


def test_move_in_a_finished_game_is_refused(client):
    s = new(client, model="random", sims=2)
    sid = s["id"]
    # X: 1 2 3 wins unless O blocks; play the first legal move each turn until the end
    while not s["over"]:
        s = (client.post(f"/api/sessions/{sid}/move", json={"move": s["legal"][0]["move"]}) if s["your_turn"]
             else client.post(f"/api/sessions/{sid}/ai")).json()
    _error(client.post(f"/api/sessions/{sid}/move", json={"move": "5"}), 409, "the game is over")
    _error(client.post(f"/api/sessions/{sid}/ai"), 409, "the game is over")


def test_serve_binds_to_localhost_by_default():
    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.port == 8000


def test_recorded_games_from_real_stages(tmp_path, mlflow_db, monkeypatch):
    """Self-play and gate stages write what the viewer steps through."""
    from zeroloop.pipeline.stages import gate, init, selfplay

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    p = parse_params({"game": "tictactoe", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                      "mcts": {"simulations": 8}, "selfplay": {"games": 6, "shard_games": 4},
                      "gate": {"games": 4, "simulations": 4}, "runtime": {"workers": 1}})
    init.run(p)
    selfplay.run(p, 1, 0)
    cand = tmp_path / "models/generations/gen_1/candidate.pt"
    cand.parent.mkdir(parents=True)
    shutil.copy(tmp_path / "models/generations/gen_0/best.pt", cand)
    gate.run(p, 1, 0)
    with TestClient(create_app(tmp_path)) as c:
        recs = {r["id"]: r for r in c.get("/api/records?game=tictactoe").json()}
        assert recs["selfplay-1"]["games"] == 6 and recs["gate-1"]["games"] == 4
        assert c.get("/api/records?game=connect4").json() == []
        sp = c.get("/api/records/selfplay-1?index=5").json()  # the second shard's last game
        assert sp["index"] == 5 and sp["count"] == 6
        assert len(sp["frames"]) == len(sp["moves"]) + 1
        first = sp["frames"][0]
        assert sum(first["cells"]) == 0 and first["to_move"] == "X" and first["move"] == sp["moves"][0]
        assert abs(sum(first["shares"].values()) - 1) < 0.05 and -1 <= first["value"] <= 1
        assert sp["frames"][-1]["result"] == sp["result"]
        gt = c.get("/api/records/gate-1?index=1").json()
        assert set(gt["players"].values()) == {"gen1", "gen0"}
        assert sum(1 for v in gt["frames"][-1]["cells"] if v) == len(gt["moves"])
        _error(c.get("/api/records/selfplay-1?index=6"), 404, "game index 6 is out of range 0..5")
        _error(c.get("/api/records/gate-1?index=x"), 422, "index: Input should be a valid integer")


def test_damaged_or_malformed_record_files_are_named(client, tmp_path):
    gen = tmp_path / "reports/generations/gen_2"
    gen.mkdir(parents=True)
    (gen / "gate_games.json").write_text('{"game": "tictactoe", "a": "gen2", "b": "gen1", '
                                         '"games": [{"moves": "1 1", "a_first": true}]}')
    _error(client.get("/api/records/gate-2?index=0"), 422, "record 'gate-2' is malformed")
    (gen / "gate_games.json").write_text('{"game": "tictactoe", "games": [{"moves": "1 2"}]}')
    _error(client.get("/api/records/gate-2?index=0"), 422, "record 'gate-2' is malformed: KeyError")
    # a self-play shard damaged after it was written
    from zeroloop.pipeline.data.storage import save_shard

    d = tmp_path / "data/gen_1"
    d.mkdir(parents=True)
    save_shard(d / "shard_00000.zls", {"actions": np.zeros(3)}, {"games": 1})
    (d / "manifest.json").write_text('{"game": "tictactoe", "identity": {"games": 1, "shard_games": 1}, '
                                     '"shards": {"shard_00000.zls": "x"}}')
    raw = bytearray((d / "shard_00000.zls").read_bytes())
    raw[-3] ^= 0xFF
    (d / "shard_00000.zls").write_bytes(bytes(raw))
    _error(client.get("/api/records/selfplay-1?index=0"), 422, "checksum mismatch")
    # a manifest that points outside its directory is refused before any file is opened
    (d / "manifest.json").write_text('{"game": "tictactoe", "identity": {"games": 1, "shard_games": 1}, '
                                     '"shards": {"../../models/champion.pt": "x"}}')
    _error(client.get("/api/records/selfplay-1?index=0"), 422,
           "unexpected ../../models/champion.pt")
