// The watch page: tables (from /api/tables), the commit feed live (server-sent events from
// /api/events) and a table's lineage (/api/lineage). Every value from the server goes into
// the page as text (textContent), never as markup: table names and principals come from clients.
"use strict";

const MAX_COMMITS = 200;
const seen = new Set();
let refreshTimer = null;

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function describe(commit) {
  return commit ? `#${commit.seq} ${commit.operation} ${commit.committed_at}` : "";
}

async function loadTables() {
  const response = await fetch("/api/tables", { cache: "no-store" });
  if (!response.ok) return;
  const body = await response.json();
  document.getElementById("head").textContent = `head ${body.head}`;
  const tbody = document.querySelector("#tables tbody");
  const rows = body.tables.map((t) => {
    const tr = document.createElement("tr");
    tr.dataset.table = t.name;
    const name = cell(tr, t.name, "name");
    name.addEventListener("click", () => showLineage(t.name));
    cell(tr, t.rows, "num rows");
    cell(tr, t.snapshot_id, "num");
    cell(tr, describe(t.last_commit));
    return tr;
  });
  tbody.replaceChildren(...rows);
}

function scheduleRefresh() {
  // A burst of commits reloads the tables once.
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; loadTables(); }, 150);
}

function addCommit(event) {
  if (seen.has(event.seq)) return;
  seen.add(event.seq);
  const tbody = document.querySelector("#commits tbody");
  const tr = document.createElement("tr");
  tr.dataset.seq = String(event.seq);
  tr.className = "fresh";
  cell(tr, event.seq, "num");
  cell(tr, event.committed_at);
  cell(tr, `${event.namespace}.${event.table}`, "table");
  cell(tr, event.operation, "operation");
  cell(tr, event.added_rows, "num");
  cell(tr, event.principal);
  tbody.insertBefore(tr, tbody.firstChild);
  while (tbody.children.length > MAX_COMMITS) tbody.removeChild(tbody.lastChild);
  document.getElementById("head").textContent = `head ${event.seq}`;
}

function follow() {
  const state = document.getElementById("feed-state");
  const source = new EventSource("/api/events");
  source.addEventListener("hello", () => {
    state.textContent = "live";
    state.className = "state live";
    loadTables();
  });
  source.addEventListener("commit", (message) => {
    addCommit(JSON.parse(message.data));
    scheduleRefresh();
  });
  // This page fell behind and missed events: the tables are reloaded instead.
  source.addEventListener("resync", () => loadTables());
  source.onerror = () => {
    state.textContent = "reconnecting…";
    state.className = "state down";
  };
}

const SVG = "http://www.w3.org/2000/svg";

function svgNode(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

async function showLineage(table) {
  const response = await fetch(`/api/lineage?table=${encodeURIComponent(table)}`, { cache: "no-store" });
  const svg = document.getElementById("lineage");
  document.getElementById("lineage-name").textContent = `of ${table}`;
  if (!response.ok) { svg.replaceChildren(); return; }
  const graph = await response.json();
  const upstream = graph.edges.filter((e) => e.to === table).map((e) => e.from);
  const downstream = graph.edges.filter((e) => e.from === table).map((e) => e.to);
  const columns = [upstream, [table], downstream];
  const boxW = 180, boxH = 24, gapY = 10, colX = [10, 230, 450];
  const height = Math.max(60, Math.max(...columns.map((c) => c.length)) * (boxH + gapY) + 20);
  svg.setAttribute("height", String(height));
  const defs = svgNode("defs", {});
  const marker = svgNode("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                                      markerWidth: 6, markerHeight: 6, orient: "auto" });
  marker.appendChild(svgNode("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8aa" }));
  defs.appendChild(marker);
  const parts = [defs];
  const centre = {};
  columns.forEach((names, c) => {
    names.forEach((name, i) => {
      const y = 10 + i * (boxH + gapY) + (c === 1 ? (height - 20 - boxH) / 2 - 10 : 0);
      centre[`${c}:${name}`] = [colX[c], y + boxH / 2];
      const focus = c === 1 ? "focus" : "";
      const group = svgNode("g", { "data-node": name });
      group.appendChild(svgNode("rect", { x: colX[c], y, width: boxW, height: boxH, rx: 4, class: focus }));
      group.appendChild(svgNode("text", { x: colX[c] + 8, y: y + 16, class: focus }, name));
      parts.push(group);
    });
  });
  const [tx, ty] = centre[`1:${table}`];
  upstream.forEach((name) => {
    const [x, y] = centre[`0:${name}`];
    parts.push(svgNode("line", { x1: x + boxW, y1: y, x2: tx, y2: ty }));
  });
  downstream.forEach((name) => {
    const [x, y] = centre[`2:${name}`];
    parts.push(svgNode("line", { x1: tx + boxW, y1: ty, x2: x, y2: y }));
  });
  svg.replaceChildren(...parts);
}

document.addEventListener("DOMContentLoaded", () => {
  loadTables();
  follow();
});
