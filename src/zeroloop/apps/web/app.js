// zeroloop page: play a model, step through recorded games. Talks to the JSON API in server.py.
"use strict";

const $ = (id) => document.getElementById(id);
let games = {};        // name -> {rows, cols, click, title}
let session = null;    // the current game's state from the server
let busy = false;

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  const data = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(data.error || `HTTP ${res.status}`);
  return data;
}

function showError(el, err) {
  el.textContent = err ? String(err.message || err) : "";
  el.hidden = !err;
}

// ---- board drawing -------------------------------------------------------------
function drawBoard(el, game, cells, opts) {
  const { last = -1, playable = new Set(), shares = {}, onClick = null } = opts || {};
  el.innerHTML = "";
  el.style.gridTemplateColumns = `repeat(${game.cols}, auto)`;
  el.className = "board" + (game.cols > 7 ? " small" : "") + (game.name.startsWith("othello") ? " othello" : "");
  el.dataset.game = game.name;
  const marks = game.name === "tictactoe";
  cells.forEach((v, i) => {
    const c = document.createElement("div");
    c.className = "cell";
    c.dataset.cell = i;
    c.dataset.row = Math.floor(i / game.cols);
    c.dataset.col = i % game.cols;
    if (v) {
      c.dataset.stone = v === 1 ? "X" : "O";
      const s = document.createElement("div");
      if (marks) { s.className = `mark s${v}`; s.textContent = v === 1 ? "X" : "O"; }
      else { s.className = `stone s${v}`; }
      c.appendChild(s);
    }
    if (i === last) c.classList.add("last");
    if (playable.has(i)) c.classList.add("playable");
    if (shares[i] !== undefined) {
      const t = document.createElement("span");
      t.className = "share";
      t.textContent = Math.round(100 * shares[i]) + "%";
      c.appendChild(t);
    }
    if (onClick) c.addEventListener("click", () => onClick(i));
    el.appendChild(c);
  });
}

// ---- play ----------------------------------------------------------------------
async function loadGames() {
  const list = await api("GET", "/api/games");
  for (const sel of [$("game-select"), $("viewer-game")]) sel.innerHTML = "";
  for (const g of list) {
    games[g.name] = g;
    for (const sel of [$("game-select"), $("viewer-game")]) sel.add(new Option(g.title, g.name));
  }
  await loadModels();
  await loadRecords();
}

async function loadModels() {
  const data = await api("GET", `/api/models?game=${encodeURIComponent($("game-select").value)}`);
  const sel = $("model-select");
  sel.innerHTML = "";
  for (const m of data.models) sel.add(new Option(m.label, m.id));
}

function moveForClick(cell) {
  const g = games[session.game];
  if (g.click === "column") {
    const col = cell % g.cols;
    return session.legal.find((m) => m.cell !== null && m.cell % g.cols === col);
  }
  return session.legal.find((m) => m.cell === cell);
}

function render() {
  const s = session;
  const g = games[s.game];
  const playable = new Set();
  if (s.your_turn && !busy) {
    for (const m of s.legal) {
      if (m.cell === null) continue;
      if (g.click === "column") {
        for (let r = 0; r < g.rows; r++) playable.add(r * g.cols + (m.cell % g.cols));
      } else playable.add(m.cell);
    }
  }
  const shares = {};
  if (s.last_ai) for (const v of s.last_ai.visits) if (v.cell !== null && v.share >= 0.01) shares[v.cell] = v.share;
  drawBoard($("board"), g, s.cells, { last: s.last, playable, shares, onClick: (i) => clickCell(i) });

  const status = $("status");
  status.classList.toggle("over", s.over);
  if (s.over) status.textContent = s.outcome === "draw" ? "Game over: draw." : `Game over: ${s.result}, ${s.outcome}.`;
  else if (busy) status.textContent = "The AI is thinking...";
  else if (s.your_turn) status.textContent = `Your move (${s.human}).`;
  else status.textContent = "The AI's move.";
  status.dataset.outcome = s.outcome || "";

  $("pass").hidden = !(s.your_turn && s.legal.some((m) => m.cell === null));
  $("undo").disabled = busy || s.moves.length === 0;
  $("restart").disabled = busy;
  $("moves").textContent = s.moves.length ? "Moves: " + s.moves.join(" ") : "";

  const ai = s.last_ai;
  $("ai-move").textContent = ai ? `played ${ai.move}` : "-";
  $("ai-value").textContent = ai ? `${ai.value >= 0 ? "+" : ""}${ai.value.toFixed(2)} (expected score ${Math.round(50 * (ai.value + 1))}%)` : "-";
  $("ai-meter").style.width = ai ? `${Math.round(50 * (ai.value + 1))}%` : "50%";
  const body = $("visits").tBodies[0];
  body.innerHTML = "";
  if (ai) {
    for (const v of ai.visits.slice(0, 10)) {
      const tr = body.insertRow();
      tr.insertCell().textContent = v.move;
      const bar = tr.insertCell();
      bar.className = "bar";
      bar.innerHTML = `<div style="width:${Math.max(1, Math.round(120 * v.share))}px"></div>`;
      tr.insertCell().textContent = `${(100 * v.share).toFixed(1)}% (${v.visits})`;
      tr.insertCell().textContent = `q ${v.q >= 0 ? "+" : ""}${v.q.toFixed(2)}`;
    }
  }
}

async function step(promise) {
  showError($("error"), null);
  try {
    session = await promise;
    render();
    if (!session.over && !session.your_turn) {
      busy = true;
      render();
      try { session = await api("POST", `/api/sessions/${session.id}/ai`); }
      finally { busy = false; }
      render();
    }
  } catch (err) {
    busy = false;
    showError($("error"), err);
    if (session) render();
  }
}

function clickCell(i) {
  if (!session || busy || !session.your_turn) return;
  const m = moveForClick(i);
  if (!m) { showError($("error"), "That is not a legal move here."); return; }
  step(api("POST", `/api/sessions/${session.id}/move`, { move: m.move }));
}

// ---- viewer --------------------------------------------------------------------
let record = null;
let frame = 0;

async function loadRecords() {
  const list = await api("GET", `/api/records?game=${encodeURIComponent($("viewer-game").value)}`);
  const sel = $("record-select");
  sel.innerHTML = "";
  for (const r of list) sel.add(new Option(r.label, r.id));
  if (!list.length) sel.add(new Option("(no recorded games: run the pipeline first)", ""));
}

async function loadRecord() {
  showError($("viewer-error"), null);
  const id = $("record-select").value;
  if (!id) return;
  try {
    record = await api("GET", `/api/records/${encodeURIComponent(id)}?index=${Number($("record-index").value) || 0}`);
    $("record-index").max = record.count - 1;
    $("step-slider").max = record.frames.length - 1;
    showFrame(0);
  } catch (err) { showError($("viewer-error"), err); }
}

function showFrame(i) {
  if (!record) return;
  frame = Math.max(0, Math.min(i, record.frames.length - 1));
  const f = record.frames[frame];
  const g = { name: record.game, rows: record.rows, cols: record.cols };
  const shares = {};
  if (f.share_cells) for (const [c, p] of Object.entries(f.share_cells)) if (c >= 0) shares[Number(c)] = p;
  drawBoard($("viewer-board"), g, f.cells, { last: f.last, shares });
  $("step-slider").value = frame;
  $("viewer-title").textContent = `Game ${record.index + 1} of ${record.count}: X ${record.players.X} vs O ${record.players.O}; ${record.result}. Position ${frame} of ${record.frames.length - 1}.`;
  let info = f.move ? `${f.to_move} to move, played ${f.move}` : `final position: ${f.result}`;
  if (f.value !== undefined && f.value !== null) info += `; search value for ${f.to_move}: ${f.value >= 0 ? "+" : ""}${f.value.toFixed(2)}`;
  $("frame-info").textContent = info;
  const body = $("frame-shares").tBodies[0];
  body.innerHTML = "";
  if (f.shares) {
    for (const [m, p] of Object.entries(f.shares).sort((a, b) => b[1] - a[1]).slice(0, 10)) {
      const tr = body.insertRow();
      tr.insertCell().textContent = m;
      tr.insertCell().textContent = `${(100 * p).toFixed(1)}% of visits`;
    }
  }
  $("viewer-moves").textContent = "Moves: " + record.moves.map((m, k) => (k === frame ? `[${m}]` : m)).join(" ");
}

// ---- wiring --------------------------------------------------------------------
document.querySelectorAll(".tab").forEach((t) => t.addEventListener("click", () => {
  document.querySelectorAll(".tab").forEach((x) => x.classList.toggle("active", x === t));
  document.querySelectorAll(".panel").forEach((p) => { p.hidden = p.id !== t.dataset.panel; });
}));
$("game-select").addEventListener("change", () => loadModels().catch((e) => showError($("error"), e)));
$("viewer-game").addEventListener("change", () => loadRecords().catch((e) => showError($("viewer-error"), e)));
$("setup").addEventListener("submit", (ev) => {
  ev.preventDefault();
  step(api("POST", "/api/sessions", {
    game: $("game-select").value, model: $("model-select").value || null,
    sims: Number($("sims").value) || 200, human_first: $("side").value === "first",
  }));
});
$("undo").addEventListener("click", () => session && step(api("POST", `/api/sessions/${session.id}/undo`)));
$("restart").addEventListener("click", () => session && step(api("POST", `/api/sessions/${session.id}/restart`)));
$("pass").addEventListener("click", () => {
  const m = session && session.legal.find((x) => x.cell === null);
  if (m) step(api("POST", `/api/sessions/${session.id}/move`, { move: m.move }));
});
$("record-load").addEventListener("click", loadRecord);
$("step-first").addEventListener("click", () => showFrame(0));
$("step-back").addEventListener("click", () => showFrame(frame - 1));
$("step-forward").addEventListener("click", () => showFrame(frame + 1));
$("step-last").addEventListener("click", () => showFrame(Infinity));
$("step-slider").addEventListener("input", (e) => showFrame(Number(e.target.value)));
document.addEventListener("keydown", (e) => {
  if ($("viewer").hidden || !record || e.target.tagName === "INPUT") return;
  if (e.key === "ArrowLeft") showFrame(frame - 1);
  if (e.key === "ArrowRight") showFrame(frame + 1);
});
loadGames().catch((e) => showError($("error"), e));
