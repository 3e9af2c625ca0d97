"""``zeroloop serve``: a web page to play the trained models and to step
through recorded games, and the JSON API behind it (FastAPI).

Every error is a 4xx with ``{"error": "..."}`` naming what was wrong: an
illegal or malformed move, a move in a finished game or out of turn, an
unknown game, model, session or record, a body that is not JSON or has
wrong or unknown fields, or one that is too large.

Searches are bounded: at most ``max_searches`` AI moves search at once (one
per core by default), a further one is answered 503 with ``Retry-After`` at
once, so a burst of AI requests cannot starve the rest of the API; a client
that disconnects cancels its search and its move is not played. A game holds
no search tree between moves.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from zeroloop.apps.play import NetCache, PlayError, PlaySession, new_session
from zeroloop.apps.records import list_records, load_record
from zeroloop.engine.games import make_game
from zeroloop.pipeline.data.catalogue import list_models

WEB_DIR = Path(__file__).parent / "web"

#: Longest move text accepted ("c10", "pass"): longer strings are refused, never echoed back.
MAX_MOVE_CHARS = 16
#: Largest request body accepted, in bytes (a request here is a few dozen).
MAX_BODY_BYTES = 16 * 1024

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
    game: str = Field(description="a game name from /api/games", examples=["tictactoe", "connect4"])
    model: str | None = Field(None, description="a model id from /api/models (default: the first listed)")
    sims: int = Field(200, ge=1, le=20000, description="simulations per AI move")
    human_first: StrictBool = Field(True, description="the human plays X (moves first)")


class Move(_Body):
    move: str = Field(max_length=MAX_MOVE_CHARS,
                      description="the move in the game's notation: '5' (tic-tac-toe), '4' (Connect Four)")


class ErrorBody(BaseModel):
    error: str = Field(description="what was wrong, in one line")


def _errors(*codes: int) -> dict[int, dict[str, Any]]:
    """OpenAPI entries for the error responses an endpoint can give."""
    what = {400: "illegal or malformed move, or a body that cannot be parsed",
            404: "unknown game, model, session or record",
            409: "out of turn, after the end, or nothing to undo", 413: "request body too large",
            422: "body that is not JSON or has wrong, missing or unknown fields; damaged record",
            499: "the client went away during the search", 503: "all search slots busy; retry"}
    return {c: {"model": ErrorBody, "description": what[c]} for c in codes}


#: Games kept at most, and how long one may sit untouched before it may be dropped.
MAX_SESSIONS = 200
IDLE_MINUTES = 30.0


class SessionsFull(PlayError):
    """No room for a new game: every kept game was used recently (503, Retry-After)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, 503)
        self.retry_after_s = retry_after_s


class Sessions:
    """Games in progress, by id. At most ``limit`` are kept; a new game takes
    the place of one untouched for ``idle_s`` seconds (the least recently used
    first), never of a game in use or whose engine is thinking. When none is
    idle the new game is refused (:class:`SessionsFull`): live games are never
    dropped to make room."""

    def __init__(self, limit: int = MAX_SESSIONS, idle_s: float = IDLE_MINUTES * 60) -> None:
        self.limit, self.idle_s = limit, idle_s
        self._items: OrderedDict[str, PlaySession] = OrderedDict()
        self._used: dict[str, float] = {}
        self.views: dict[str, dict[str, Any]] = {}  # each game's last state, shown while its engine thinks
        self._lock = threading.Lock()

    def add(self, session: PlaySession) -> str:
        import time

        sid = secrets.token_urlsafe(8)
        with self._lock:
            now = time.monotonic()
            if len(self._items) >= self.limit:
                for old in list(self._items):  # least recently used first
                    if len(self._items) < self.limit or now - self._used[old] < self.idle_s:
                        break
                    if not self._items[old].lock.locked():
                        del self._items[old], self._used[old]
                        self.views.pop(old, None)
            if len(self._items) >= self.limit:
                oldest = self._used[next(iter(self._items))]
                wait = max(1, int(self.idle_s - (now - oldest)) + 1)
                raise SessionsFull(f"the server holds {self.limit} games in use, its limit; a game untouched "
                                   f"for {self.idle_s / 60:g} minutes makes room (retry in {wait} s)", wait)
            self._items[sid] = session
            self._used[sid] = now
        return sid

    def get(self, sid: str) -> PlaySession:
        import time

        with self._lock:
            session = self._items.get(sid)
            if session is None:
                raise PlayError(f"unknown game session {sid!r} (it may have expired; start a new game)", 404)
            self._items.move_to_end(sid)
            self._used[sid] = time.monotonic()
            return session

    def __len__(self) -> int:
        return len(self._items)


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Refuses request bodies over ``limit`` bytes with a 413, by the declared
    length or, for a chunked body, as it arrives. Plain ASGI (not Starlette's
    BaseHTTPMiddleware), so handlers still see the client disconnect."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counted_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        async def tracked_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except _TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send) -> None:
        body = JSONResponse({"error": f"request body too large (at most {self.limit} bytes)"}).body
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


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


def create_app(root: str | Path = ".", device: str = "auto", seed: int = 0,
               max_searches: int | None = None, max_sessions: int = MAX_SESSIONS,
               idle_minutes: float = IDLE_MINUTES) -> FastAPI:
    """The app; ``root`` is the project directory whose ``models/``, ``data/``
    and ``reports/`` it serves; ``max_searches`` AI searches run at once
    (default: one per core); at most ``max_sessions`` games are kept, a game
    idle ``idle_minutes`` making room for a new one (:class:`Sessions`)."""
    from zeroloop.pipeline.runtime.backend import local_cores

    root = Path(root)
    app = FastAPI(title="zeroloop", description="Play zeroloop models and view recorded games.",
                  version="1")
    nets = NetCache(device)
    sessions = Sessions(max_sessions, idle_minutes * 60)
    views = sessions.views
    slots = threading.BoundedSemaphore(max_searches or local_cores())
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(PlayError)
    async def _play_error(request: Request, exc: PlayError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, SessionsFull) else None
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)

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
        return JSONResponse({"error": detail}, status_code=exc.status_code, headers=exc.headers)

    def _game(name: str):
        try:
            return make_game(name)
        except ValueError as exc:
            raise PlayError(str(exc), 404) from None

    def _state(sid: str, session: PlaySession) -> dict[str, Any]:
        state = {"id": sid, **session.view(), "thinking": False}
        views[sid] = state
        return state

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

    @app.get("/api/models", responses=_errors(404))
    def models(game: str) -> dict[str, Any]:
        """The models for a game, best guess first (champion, generations, reference, shipped,
        untrained)."""
        g = _game(game)
        return {"game": g.name, "models": [m.as_dict() for m in list_models(g, root)]}

    session_links = {name: {"operationId": op, "parameters": {"sid": "$response.body#/id"}}
                     for name, op in (("Show", "show_session"), ("Move", "move"), ("AI", "ai_move"),
                                      ("Undo", "undo"), ("Restart", "restart"))}

    created = {"description": "the new game", "links": session_links}

    @app.post("/api/sessions", status_code=201, operation_id="new_session",
              responses={**_errors(400, 404, 413, 422, 503), 201: created})
    def create(body: NewGame) -> dict[str, Any]:
        """Start a game; when the AI moves first, call /ai next. 503 with
        Retry-After when the server holds its limit of games, all in use."""
        session = new_session(body.game, body.model, sims=body.sims, human_first=body.human_first,
                              root=root, nets=nets, seed=seed, allow_paths=False)
        return _state(sessions.add(session), session)

    def _act(sid: str, action, read_only: bool = False) -> dict[str, Any]:
        """One request at a time per game, none waiting: while the engine
        thinks, a read gets the last state with ``thinking: true`` and a
        change gets 409, at once (a request never holds a thread on a search)."""
        session = sessions.get(sid)
        if not session.lock.acquire(blocking=False):
            if read_only and sid in views:
                return {**views[sid], "thinking": True}
            raise PlayError("the engine is thinking about its move; wait until GET shows thinking: false",
                            409)
        try:
            action(session)
            return _state(sid, session)
        finally:
            session.lock.release()

    @app.get("/api/sessions/{sid}", operation_id="show_session", responses=_errors(404))
    def show(sid: str) -> dict[str, Any]:
        """The game's state; ``thinking`` is true while its engine searches (the state before its move)."""
        return _act(sid, lambda s: None, read_only=True)

    @app.post("/api/sessions/{sid}/move", operation_id="move", responses=_errors(400, 404, 409, 413, 422))
    def move(sid: str, body: Move) -> dict[str, Any]:
        """The human's move (409 out of turn or after the end, 400 when illegal)."""
        return _act(sid, lambda s: s.human_move(body.move))

    @app.post("/api/sessions/{sid}/ai", operation_id="ai_move", responses=_errors(404, 409, 499, 503))
    async def ai(sid: str, request: Request) -> dict[str, Any]:
        """The AI searches and moves; ``last_ai`` holds its value and visit shares.
        503 with Retry-After when every search slot is busy."""
        if sessions.get(sid).lock.locked():  # 404 before taking a slot; 409 while it already thinks
            raise PlayError("the engine is already thinking about this game's move", 409)
        if not slots.acquire(blocking=False):
            return JSONResponse({"error": "the server is busy with other searches; retry in a moment"},
                                status_code=503, headers={"Retry-After": "1"})
        cancel = threading.Event()

        def search() -> dict[str, Any]:
            try:
                return _act(sid, lambda s: s.ai_move(cancel))
            finally:
                slots.release()  # when the search has really ended, cancelled or not

        task = asyncio.ensure_future(run_in_threadpool(search))
        while not task.done():
            await asyncio.wait({task}, timeout=0.25)
            if not task.done() and await request.is_disconnected():
                cancel.set()  # the thread stops at its next chunk; nobody reads the answer
        return task.result()

    @app.post("/api/sessions/{sid}/undo", operation_id="undo", responses=_errors(404, 409))
    def undo(sid: str) -> dict[str, Any]:
        """Take back the human's last move (and the AI's reply)."""
        return _act(sid, PlaySession.undo)

    @app.post("/api/sessions/{sid}/restart", operation_id="restart", responses=_errors(404, 503))
    def restart(sid: str) -> dict[str, Any]:
        """The same game, model, strength and colour, from the start."""
        old = sessions.get(sid)
        session = PlaySession(old.game, old.model, old.sims, old.human_first, old.evaluator, seed)
        return _state(sessions.add(session), session)

    @app.get("/api/records", responses=_errors(404))
    def records(game: str | None = None) -> list[dict[str, Any]]:
        """Recorded self-play and gate games under data/ and reports/."""
        if game is not None:
            game = _game(game).name
        return list_records(root, game)

    @app.get("/api/records/{record_id}", responses=_errors(404, 422))
    def record(record_id: str, index: int = 0) -> dict[str, Any]:
        """One recorded game, frame by frame."""
        return load_record(root, record_id, index)

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    return app


def serve(host: str = "127.0.0.1", port: int = 8000, root: str | Path = ".", device: str = "auto",
          max_searches: int | None = None, max_sessions: int = MAX_SESSIONS,
          idle_minutes: float = IDLE_MINUTES) -> None:
    import uvicorn

    uvicorn.run(create_app(root, device, max_searches=max_searches, max_sessions=max_sessions,
                           idle_minutes=idle_minutes), host=host, port=port,
                log_level="warning")
