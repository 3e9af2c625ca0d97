"""``zeroloop serve``: a web page to play the trained models and to step
through recorded games, and the JSON API behind it (FastAPI).

Every error is a 4xx with ``{"error": "..."}`` naming what was wrong: an
illegal or malformed move, a move in a finished game or out of turn, an
unknown game, model, session or record, a body that is not JSON or has
wrong or unknown fields.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from zeroloop.apps.play import NetCache, PlayError, PlaySession, new_session
from zeroloop.apps.records import list_records, load_record
from zeroloop.engine.games import make_game
from zeroloop.pipeline.catalogue import list_models

WEB_DIR = Path(__file__).parent / "web"

#: The games the page offers, in this order.
PLAYABLE = {
    "tictactoe": "Tic-tac-toe",
    "connect4": "Connect Four",
    "gomoku": "Gomoku 6x6 (4 in a row)",
    "othello-6x6": "Othello 6x6",
    "othello": "Othello 8x8",
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewGame(_Body):
    game: str = Field(description="a game name from /api/games")
    model: str | None = Field(None, description="a model id from /api/models (default: the first listed)")
    sims: int = Field(200, ge=1, le=20000, description="simulations per AI move")
    human_first: bool = Field(True, description="the human plays X (moves first)")


class Move(_Body):
    move: str = Field(description="the move in the game's notation: '5' (tic-tac-toe), '4' (Connect Four)")


class Sessions:
    """Games in progress, by id; the oldest is dropped beyond ``limit``."""

    def __init__(self, limit: int = 200) -> None:
        self.limit = limit
        self._items: OrderedDict[str, PlaySession] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, session: PlaySession) -> str:
        sid = secrets.token_urlsafe(8)
        with self._lock:
            self._items[sid] = session
            while len(self._items) > self.limit:
                self._items.popitem(last=False)
        return sid

    def get(self, sid: str) -> PlaySession:
        with self._lock:
            session = self._items.get(sid)
            if session is None:
                raise PlayError(f"unknown game session {sid!r} (it may have expired; start a new game)", 404)
            self._items.move_to_end(sid)
            return session


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            return f"malformed JSON body: {err.get('ctx', {}).get('error', err.get('msg'))}"
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        msg = err.get("msg", "invalid")
        if err.get("type") == "missing":
            msg = "required field is missing"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


def create_app(root: str | Path = ".", device: str = "auto", seed: int = 0) -> FastAPI:
    """The app; ``root`` is the project directory whose ``models/``, ``data/``
    and ``reports/`` it serves."""
    root = Path(root)
    app = FastAPI(title="zeroloop", description="Play zeroloop models and view recorded games.",
                  version="1")
    nets = NetCache(device)
    sessions = Sessions()

    @app.exception_handler(PlayError)
    async def _play_error(request: Request, exc: PlayError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _validation_message(exc)}, status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:  # a bug: say so, still JSON
        return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such page or endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        return JSONResponse({"error": detail}, status_code=exc.status_code)

    def _game(name: str):
        try:
            return make_game(name)
        except ValueError as exc:
            raise PlayError(str(exc), 404) from None

    def _state(sid: str, session: PlaySession) -> dict[str, Any]:
        return {"id": sid, **session.view()}

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    @app.get("/api/games")
    def games() -> list[dict[str, Any]]:
        """The games the page offers, with board sizes and how moves are written."""
        out = []
        for name, title in PLAYABLE.items():
            g = make_game(name)
            out.append({"name": name, "title": title, "rows": g.rows, "cols": g.cols,
                        "click": "column" if name == "connect4" else "cell",
                        "notation": g.format_action(0) + ", " + g.format_action(1) + ", ..."})
        return out

    @app.get("/api/models")
    def models(game: str) -> dict[str, Any]:
        """The models for a game, best guess first (champion, generations, shipped, untrained)."""
        g = _game(game)
        return {"game": g.name, "models": [m.as_dict() for m in list_models(g, root)]}

    @app.post("/api/sessions", status_code=201)
    def create(body: NewGame) -> dict[str, Any]:
        """Start a game; when the AI moves first, call /ai next."""
        session = new_session(body.game, body.model, sims=body.sims, human_first=body.human_first,
                              root=root, nets=nets, seed=seed, allow_paths=False)
        return _state(sessions.add(session), session)

    def _act(sid: str, action) -> dict[str, Any]:
        session = sessions.get(sid)
        with session.lock:  # one request at a time per game
            action(session)
            return _state(sid, session)

    @app.get("/api/sessions/{sid}")
    def show(sid: str) -> dict[str, Any]:
        return _act(sid, lambda s: None)

    @app.post("/api/sessions/{sid}/move")
    def move(sid: str, body: Move) -> dict[str, Any]:
        """The human's move (409 out of turn or after the end, 400 when illegal)."""
        return _act(sid, lambda s: s.human_move(body.move))

    @app.post("/api/sessions/{sid}/ai")
    def ai(sid: str) -> dict[str, Any]:
        """The AI searches and moves; ``last_ai`` holds its value and visit shares."""
        return _act(sid, PlaySession.ai_move)

    @app.post("/api/sessions/{sid}/undo")
    def undo(sid: str) -> dict[str, Any]:
        """Take back the human's last move (and the AI's reply)."""
        return _act(sid, PlaySession.undo)

    @app.post("/api/sessions/{sid}/restart")
    def restart(sid: str) -> dict[str, Any]:
        """The same game, model, strength and colour, from the start."""
        old = sessions.get(sid)
        session = PlaySession(old.game, old.model, old.sims, old.human_first, old.evaluator, seed)
        return _state(sessions.add(session), session)

    @app.get("/api/records")
    def records(game: str | None = None) -> list[dict[str, Any]]:
        """Recorded self-play and gate games under data/ and reports/."""
        if game is not None:
            game = _game(game).name
        return list_records(root, game)

    @app.get("/api/records/{record_id}")
    def record(record_id: str, index: int = 0) -> dict[str, Any]:
        """One recorded game, frame by frame."""
        return load_record(root, record_id, index)

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    return app


def serve(host: str = "127.0.0.1", port: int = 8000, root: str | Path = ".", device: str = "auto") -> None:
    import uvicorn

    uvicorn.run(create_app(root, device), host=host, port=port, log_level="warning")
