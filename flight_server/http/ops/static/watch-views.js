// Views of the watch page that only draw what they are given: the health strip and charts
// (/api/summary), a table's page (/api/table) and its lineage (/api/lineage). watch.js fetches
// and decides. Every value from the server goes into the page as text (textContent) or an SVG
// attribute, never as markup: table names, columns and principals come from clients.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function svgNode(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function number(value, digits) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "string") return value;  // 63-bit ids arrive as text
  return value.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 0 : digits });
}

function bytes(value) {
  if (value === null || value === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = Number(value), i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toLocaleString("en-US", { maximumFractionDigits: i ? 1 : 0 })} ${units[i]}`;
}

function duration(seconds) {
  const s = Math.floor(seconds);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

function setStat(id, text, state) {
  const node = document.getElementById(id);
  node.textContent = text;
  node.className = `value${state ? ` ${state}` : ""}`;
}

// -- health strip and charts ------------------------------------------------------------------

function drawChart(svg, values, unit) {
  const width = Number(svg.getAttribute("width")), height = Number(svg.getAttribute("height"));
  const known = values.filter((v) => v !== null && v !== undefined);
  const top = Math.max(1e-9, ...known);
  const step = values.length > 1 ? (width - 4) / (values.length - 1) : 0;
  const points = [];
  values.forEach((v, i) => {
    if (v === null || v === undefined) return;
    points.push(`${(2 + i * step).toFixed(1)},${(height - 14 - (v / top) * (height - 20)).toFixed(1)}`);
  });
  const last = known.length ? known[known.length - 1] : null;
  svg.dataset.points = String(known.length);
  svg.dataset.last = last === null ? "" : String(last);
  svg.replaceChildren(
    svgNode("polyline", { points: points.join(" "), class: "line" }),
    svgNode("text", { x: 2, y: height - 2, class: "axis" }, `max ${number(top, 2)}${unit}`),
    svgNode("text", { x: width - 2, y: height - 2, class: "axis end" },
            last === null ? "no data" : `now ${number(last, 2)}${unit}`),
  );
}

function showSummary(body) {
  setStat("stat-ready", body.ready ? "ready" : "not ready", body.ready ? "good" : "bad");
  const latest = body.series.length ? body.series[body.series.length - 1] : {};
  const lastKnown = (key) => {
    for (let i = body.series.length - 1; i >= 0; i -= 1) if (body.series[i][key] !== null) return body.series[i][key];
    return null;
  };
  setStat("stat-commit-rate", number(latest.commits_per_s, 2));
  setStat("stat-row-rate", number(latest.rows_per_s, 1));
  const lag = lastKnown("feed_lag_ms"), query = lastKnown("query_ms");
  setStat("stat-feed-lag", lag === null ? "—" : `${number(lag, 1)} ms`, lag !== null && lag > 1000 ? "bad" : "");
  setStat("stat-query-latency", query === null ? "—" : `${number(query, 1)} ms`);
  const subs = body.feed_subscribers;
  setStat("stat-subscribers", `${subs.live + subs.log} (${subs.log} catching up)`, subs.log ? "warn" : "");
  setStat("stat-watchers", String(body.watch_streams));
  setStat("stat-queries", `${body.queries.running} running, ${body.queries.queued} queued`,
          body.queries.queued ? "warn" : "");
  setStat("stat-refused", number(body.refused_writes), body.refused_writes ? "warn" : "");
  const lineage = body.lineage;
  setStat("stat-lineage", `${lineage.state}: ${number(lineage.outbox_depth)} waiting, ` +
          `${number(lineage.dead_letters)} dead`, lineage.dead_letters ? "bad" : lineage.outbox_depth > 100 ? "warn" : "");
  setStat("stat-log", body.head === undefined ? "closed" : `seq ${body.log_start}–${body.head}`);
  setStat("stat-uptime", duration(body.uptime_s));
  drawChart(document.getElementById("chart-commits"), body.series.map((p) => p.commits_per_s), "");
  drawChart(document.getElementById("chart-rows"), body.series.map((p) => p.rows_per_s), "");
  drawChart(document.getElementById("chart-lag"), body.series.map((p) => p.feed_lag_ms), " ms");
  drawChart(document.getElementById("chart-query"), body.series.map((p) => p.query_ms), " ms");
}

// -- a table's page ---------------------------------------------------------------------------

function describeCommit(commit) {
  return commit ? `#${commit.seq} ${commit.operation} ${commit.committed_at}` : "not in the recent log";
}

function showTable(detail) {
  document.getElementById("table-name").textContent = detail.name;
  const facts = [
    ["rows", number(detail.rows)], ["data files", number(detail.data_files)], ["bytes", bytes(detail.bytes)],
    ["delete files", number(detail.delete_files)], ["snapshots", number(detail.snapshot_count)],
    ["current snapshot", detail.snapshot_id === null ? "none" : String(detail.snapshot_id)],
    ["format version", String(detail.format_version)],
    ["partitioning", detail.partitioning.length
      ? detail.partitioning.map((p) => `${p.name} (${p.transform})`).join(", ") : "unpartitioned"],
    ["last commit", describeCommit(detail.last_commit)],
    ["last maintenance", describeCommit(detail.last_maintenance)],
  ];
  const dl = document.getElementById("table-facts");
  dl.replaceChildren(...facts.flatMap(([label, value]) => {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = label;
    dd.textContent = value;
    dd.dataset.fact = label;
    return [dt, dd];
  }));
  document.querySelector("#table-schema tbody").replaceChildren(...detail.schema.fields.map((f) => {
    const tr = document.createElement("tr");
    cell(tr, f.id, "num"); cell(tr, f.name, "name"); cell(tr, f.type); cell(tr, f.required ? "yes" : "no");
    return tr;
  }));
  document.querySelector("#table-properties tbody").replaceChildren(...Object.entries(detail.properties).map(([k, v]) => {
    const tr = document.createElement("tr");
    cell(tr, k); cell(tr, v);
    return tr;
  }));
  document.getElementById("snapshot-count").textContent =
    `(${detail.snapshots.length} newest of ${detail.snapshot_count})`;
  document.querySelector("#table-snapshots tbody").replaceChildren(...detail.snapshots.map((s) => {
    const tr = document.createElement("tr");
    if (s.current) tr.className = "current";
    cell(tr, s.snapshot_id, "num"); cell(tr, s.committed_at); cell(tr, s.operation);
    cell(tr, number(s.added_rows), "num"); cell(tr, number(s.deleted_rows), "num");
    cell(tr, number(s.added_files), "num"); cell(tr, number(s.deleted_files), "num");
    return tr;
  }));
}

function drawLineage(table, graph) {
  const svg = document.getElementById("lineage");
  document.getElementById("lineage-name").textContent = `of ${table}`;
  if (!graph) { svg.replaceChildren(); return; }
  const upstream = graph.edges.filter((e) => e.to === table).map((e) => e.from);
  const downstream = graph.edges.filter((e) => e.from === table).map((e) => e.to);
  const columns = [upstream, [table], downstream];
  const boxW = 180, boxH = 24, gapY = 10, colX = [10, 230, 450];
  const height = Math.max(60, Math.max(...columns.map((c) => c.length)) * (boxH + gapY) + 20);
  svg.setAttribute("height", String(height));
  const defs = svgNode("defs", {});
  const marker = svgNode("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                                      markerWidth: 6, markerHeight: 6, orient: "auto" });
  marker.appendChild(svgNode("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
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
