// The watch page: commit history from the commit log (/api/commits, paged and filtered), new
// commits live (server-sent events from /api/events), the tables (/api/tables), a health strip
// and charts (/api/summary, polled) and a page per table (#table=ns.t: /api/table and
// /api/lineage). Drawing is in watch-views.js.
//
// The commit list is bounded: at most MAX_ROWS rows are kept. Live commits push the oldest rows
// out (they stay one "older commits" click away); paging back drops the newest instead and
// leaves the list, until "back to latest", off the live feed (new rows would not join up).
// Page size and bound can be set in the address (?page_size=N&max_rows=M).
"use strict";

const params = new URLSearchParams(location.search);
const clamp = (raw, low, high, fallback) => {
  const n = Number.parseInt(raw ?? "", 10);
  return Number.isFinite(n) ? Math.min(high, Math.max(low, n)) : fallback;
};
const PAGE_SIZE = clamp(params.get("page_size"), 1, 500, 50);
const MAX_ROWS = clamp(params.get("max_rows"), PAGE_SIZE, 5000, 200);
const SUMMARY_EVERY_MS = 2000;

const history = {
  table: "",          // filter: "" = every table
  operation: "",      // filter: "" = every operation, "maintenance" = no row change
  nextBefore: null,   // seq to page back from (null: the start of the log was reached)
  atLatest: true,     // the newest rows are shown (live commits join at the top)
  generation: 0,      // bumped on every reload: answers to older requests are dropped
};
let refreshTimer = null;

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store", headers: { accept: "application/json" } });
  if (!response.ok) {
    let message = `${response.status}`;
    try { message = (await response.json()).error || message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response.json();
}

// -- tables -----------------------------------------------------------------------------------

async function loadTables() {
  let body;
  try { body = await getJson("/api/tables"); } catch (_) { return; }
  document.getElementById("head").textContent = `head ${body.head}`;
  const rows = body.tables.map((t) => {
    const tr = document.createElement("tr");
    tr.dataset.table = t.name;
    const name = cell(tr, t.name, "name");
    name.addEventListener("click", () => { location.hash = `table=${encodeURIComponent(t.name)}`; });
    cell(tr, t.rows, "num rows");
    cell(tr, t.snapshot_id, "num");
    cell(tr, describeCommit(t.last_commit));
    return tr;
  });
  document.querySelector("#tables tbody").replaceChildren(...rows);
  // The filter lists every table (keeping the one chosen, even if it was dropped meanwhile).
  const select = document.getElementById("filter-table");
  const names = body.tables.map((t) => t.name);
  if (history.table && !names.includes(history.table)) names.unshift(history.table);
  const options = names.map((n) => { const o = document.createElement("option"); o.value = n; o.textContent = n; return o; });
  const all = document.createElement("option"); all.value = ""; all.textContent = "all tables";
  select.replaceChildren(all, ...options);
  select.value = history.table;
}

function scheduleRefresh() {
  // A burst of commits reloads the tables once.
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; loadTables(); }, 150);
}

// -- commit history ---------------------------------------------------------------------------

function signed(n) { return n > 0 ? `+${number(n)}` : n < 0 ? `−${number(-n)}` : "0"; }

function commitRow(c) {
  const tr = document.createElement("tr");
  tr.dataset.seq = String(c.seq);
  tr.dataset.table = c.table_name;
  tr.dataset.operation = c.operation;
  if (c.maintenance) tr.classList.add("maintenance");
  cell(tr, c.seq, "num");
  cell(tr, c.committed_at);
  cell(tr, c.table_name, "table");
  const op = cell(tr, c.operation, "operation");
  if (c.maintenance) {
    const tag = document.createElement("span");
    tag.className = "tag";
    tag.textContent = c.maintenance_kind ? `maintenance: ${c.maintenance_kind}` : "maintenance";
    op.appendChild(tag);
  }
  // Maintenance rewrites rows but changes none a reader sees: its counts would only mislead.
  cell(tr, c.maintenance ? "" : number(c.added_rows), "num added");
  cell(tr, c.maintenance ? "" : number(c.deleted_rows), "num deleted");
  cell(tr, c.maintenance ? "0" : c.net_rows === null ? "—" : signed(c.net_rows), "num net");
  const removed = c.deleted_files ?? c.removed_files;
  const files = [c.added_files ? `+${c.added_files}` : "", removed ? `−${removed}` : ""].filter(Boolean).join(" ");
  cell(tr, files, "num files");
  cell(tr, c.principal);
  return tr;
}

function matchesFilter(c) {
  if (history.table && c.table_name !== history.table) return false;
  if (history.operation === "maintenance") return Boolean(c.maintenance);
  return !history.operation || c.operation === history.operation;
}

function commitsUrl(before) {
  const q = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (before !== null && before !== undefined) q.set("before", String(before));
  if (history.table) q.set("table", history.table);
  if (history.operation) q.set("operation", history.operation);
  return `/api/commits?${q}`;
}

function showHistoryState(text) {
  const tbody = document.querySelector("#commits tbody");
  const shown = tbody.children.length;
  const end = history.nextBefore === null ? "; start of the retained log" : "";
  document.getElementById("history-state").textContent = text || `${shown} shown (at most ${MAX_ROWS})${end}`;
  document.getElementById("older").disabled = history.nextBefore === null;
  document.getElementById("latest").hidden = history.atLatest;
}

// Reload the newest page (on open, a filter change, a reconnect, a resync, "back to latest").
async function loadHistory() {
  const generation = ++history.generation;
  let body;
  try { body = await getJson(commitsUrl(null)); } catch (error) { showHistoryState(`history: ${error.message}`); return; }
  if (generation !== history.generation) return;
  history.atLatest = true;
  history.nextBefore = body.next_before;
  document.querySelector("#commits tbody").replaceChildren(...body.commits.map(commitRow));
  document.getElementById("head").textContent = `head ${body.head}`;
  showHistoryState();
}

async function loadOlder() {
  if (history.nextBefore === null) return;
  const generation = history.generation;
  let body;
  try { body = await getJson(commitsUrl(history.nextBefore)); } catch (error) { showHistoryState(`history: ${error.message}`); return; }
  if (generation !== history.generation) return;
  const tbody = document.querySelector("#commits tbody");
  for (const c of body.commits) if (!tbody.querySelector(`tr[data-seq="${c.seq}"]`)) tbody.appendChild(commitRow(c));
  history.nextBefore = body.next_before;
  while (tbody.children.length > MAX_ROWS) {
    tbody.removeChild(tbody.firstChild);  // the newest go: the list stays bounded
    history.atLatest = false;
  }
  showHistoryState();
}

function addLiveCommit(c) {
  document.getElementById("head").textContent = `head ${c.seq}`;
  if (!history.atLatest || !matchesFilter(c)) return;
  const tbody = document.querySelector("#commits tbody");
  if (tbody.querySelector(`tr[data-seq="${c.seq}"]`)) return;
  const tr = commitRow(c);
  tr.classList.add("fresh");
  tbody.insertBefore(tr, tbody.firstChild);
  while (tbody.children.length > MAX_ROWS) {
    tbody.removeChild(tbody.lastChild);
    // The oldest row left: paging back starts right below the oldest still shown.
    history.nextBefore = Number(tbody.lastChild.dataset.seq);
  }
  showHistoryState();
}

function follow() {
  const state = document.getElementById("feed-state");
  const source = new EventSource("/api/events");
  source.addEventListener("hello", () => {
    state.textContent = "live";
    state.className = "state live";
    loadTables();
    refreshSummary();  // this stream now counts among the watch pages
    // On every (re)connection: whatever landed while disconnected comes from the log.
    if (history.atLatest) loadHistory();
  });
  source.addEventListener("commit", (message) => {
    addLiveCommit(JSON.parse(message.data));
    scheduleRefresh();
  });
  // This page fell behind and missed events: reload from the log instead.
  source.addEventListener("resync", () => { loadTables(); if (history.atLatest) loadHistory(); });
  source.onerror = () => {
    state.textContent = "reconnecting…";
    state.className = "state down";
  };
}

// -- ingest connectors (/api/ingest, polled with the summary) ----------------------------------

function describeCheckpoint(checkpoint) {
  const positions = Object.entries(checkpoint.positions || {});
  if (positions.length === 0) return `step ${checkpoint.step}: nothing taken yet`;
  const shown = positions.slice(0, 3).map(([part, at]) => `${part} @ ${at}`).join(", ");
  return `step ${checkpoint.step}: ${shown}${positions.length > 3 ? ` (+${positions.length - 3} more)` : ""}`;
}

async function refreshIngest() {
  let body;
  try { body = await getJson("/api/ingest"); } catch (_) { return; }
  const rows = body.connectors.map((c) => {
    const tr = document.createElement("tr");
    tr.dataset.connector = c.name;
    cell(tr, c.name, "name");
    cell(tr, c.table);
    cell(tr, c.source_uri || c.source);
    cell(tr, c.state, `state ${c.state === "up" || c.state === "starting" ? "ok" : c.state === "paused" ? "" : "bad"}`);
    cell(tr, number(c.rows), "num");
    cell(tr, number(c.commits), "num");
    cell(tr, `${number(c.lag_seconds, 1)} s`, "num");
    cell(tr, describeCheckpoint(c.checkpoint), "checkpoint");
    cell(tr, ["failed", "down", "stalled"].includes(c.state) ? c.message : "", "error");
    return tr;
  });
  document.querySelector("#ingest tbody").replaceChildren(...rows);
  document.getElementById("ingest-none").hidden = rows.length > 0;
}

// -- health strip -------------------------------------------------------------------------------

async function refreshSummary() {
  try {
    showSummary(await getJson("/api/summary"));
  } catch (_) {
    setStat("stat-ready", "unreachable", "bad");
  }
}

async function pollSummary() {
  await Promise.all([refreshSummary(), refreshIngest()]);
  setTimeout(pollSummary, SUMMARY_EVERY_MS);
}

// -- routing: #table=ns.t is a table's page -----------------------------------------------------

async function route() {
  const match = /^#table=(.+)$/.exec(location.hash);
  const table = match ? decodeURIComponent(match[1]) : "";
  document.getElementById("overview").hidden = Boolean(table);
  document.getElementById("table-page").hidden = !table;
  if (history.table !== table) {
    history.table = table;
    document.getElementById("filter-table").value = table;
    loadHistory();
  }
  if (!table) return;
  try {
    showTable(await getJson(`/api/table?table=${encodeURIComponent(table)}`));
  } catch (error) {
    document.getElementById("table-name").textContent = `${table}: ${error.message}`;
    return;
  }
  try { drawLineage(table, await getJson(`/api/lineage?table=${encodeURIComponent(table)}`)); } catch (_) { drawLineage(table, null); }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("filter-table").addEventListener("change", (e) => {
    const table = e.target.value;
    // Choosing a table opens its page; "all tables" goes back to the overview.
    location.hash = table ? `table=${encodeURIComponent(table)}` : "";
  });
  document.getElementById("filter-operation").addEventListener("change", (e) => {
    history.operation = e.target.value;
    loadHistory();
  });
  document.getElementById("older").addEventListener("click", loadOlder);
  document.getElementById("latest").addEventListener("click", loadHistory);
  window.addEventListener("hashchange", route);
  const initial = /^#table=(.+)$/.exec(location.hash);
  history.table = initial ? decodeURIComponent(initial[1]) : "";
  loadTables();
  loadHistory();
  route();
  follow();
  pollSummary();
});
