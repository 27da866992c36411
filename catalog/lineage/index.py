"""Queryable lineage: the OpenLineage events of every commit, kept as three SQL tables.

A worker of its own (running whether or not events are exported) reads commit-log records
after its cursor, builds each commit's events exactly as the exporter does
(``build_commit_events``: same job names, dataset names and column lineage) and keeps what
they say in RocksDB, together with the new cursor in one batch:

* ``lineage.runs``         one row per commit: run id, job, output, inputs, quality results;
* ``lineage.edges``        one row per (input dataset, output dataset, job): the table-level
                           graph, with how many runs took that path and the first and last;
* ``lineage.column_edges`` one row per (input column, output column): the columnLineage facets.

The cursor is a commit-log hold (``lineage-index``): the log is never trimmed past a record
the index has not taken in, so the tables miss no commit; they outlive the log itself. The
engine reads them as the virtual tables ``icefloe.lineage.*`` (``flight_server.engine``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog import keys
from catalog.commit_log import CommitRecord, CursorExpiredError

if TYPE_CHECKING:
    from catalog.rocks_catalog import RocksCatalog

logger = logging.getLogger("icefloe.lineage.index")

HOLD_NAME = "lineage-index"
CURSOR = keys.hold_key(HOLD_NAME)
RUNS, EDGES, COLUMNS = keys.LINEAGE_RUNS, keys.LINEAGE_EDGES, keys.LINEAGE_COLUMNS
NAMESPACE = ("lineage",)
_TS = pa.timestamp("us", tz="UTC")
SCHEMAS: dict[str, pa.Schema] = {
    "runs": pa.schema([
        ("seq", pa.int64()), ("run_id", pa.string()), ("job_namespace", pa.string()), ("job", pa.string()),
        ("operation", pa.string()), ("event_time", _TS), ("output_namespace", pa.string()),
        ("output", pa.string()), ("inputs", pa.list_(pa.string())), ("principal", pa.string()),
        ("added_rows", pa.int64()), ("quality", pa.string()),
    ]),
    "edges": pa.schema([
        ("source_namespace", pa.string()), ("source", pa.string()), ("target_namespace", pa.string()),
        ("target", pa.string()), ("job", pa.string()), ("runs", pa.int64()), ("first_seq", pa.int64()),
        ("last_seq", pa.int64()), ("last_event_time", _TS),
    ]),
    "column_edges": pa.schema([
        ("source_namespace", pa.string()), ("source", pa.string()), ("source_column", pa.string()),
        ("target_namespace", pa.string()), ("target", pa.string()), ("target_column", pa.string()),
        ("transformation", pa.string()), ("last_seq", pa.int64()),
    ]),
}
_PREFIX = {"runs": RUNS, "edges": EDGES, "column_edges": COLUMNS}
EventBuilder = Callable[[CommitRecord], list[dict[str, Any]]]


def _key(prefix: bytes, *parts: str) -> bytes:
    return prefix + b"\x00".join(p.encode("utf-8") for p in parts)


def _dataset(d: dict[str, Any]) -> str:
    return f"{d['namespace']}\x01{d['name']}"


def index_writes(store: Any, record: CommitRecord, events: list[dict[str, Any]]) -> dict[bytes, bytes]:
    """The rows one commit's events add to (or update in) the index."""
    complete = next((e for e in events if e.get("eventType") == "COMPLETE"), events[-1])
    job = complete["job"]
    time_us = record.committed_at_us
    puts: dict[bytes, bytes] = {}
    outputs = complete.get("outputs") or []
    inputs = complete.get("inputs") or []
    output = outputs[0] if outputs else {"namespace": "", "name": record.qualified_name}
    quality = record.extra.get("quality") if isinstance(record.extra, dict) else None
    puts[RUNS + keys.encode_u64(record.seq)] = json.dumps({
        "seq": record.seq, "run_id": complete["run"]["runId"], "job_namespace": job["namespace"], "job": job["name"],
        "operation": record.operation, "event_time": time_us, "output_namespace": output["namespace"],
        "output": output["name"], "inputs": [i["name"] for i in inputs], "principal": record.principal,
        "added_rows": record.added_rows, "quality": json.dumps(quality) if quality is not None else None,
    }).encode()
    for out in outputs:
        for source in inputs:
            key = _key(EDGES, _dataset(source), _dataset(out), job["name"])
            old = store.get(key)
            row = json.loads(old) if old is not None else {
                "source_namespace": source["namespace"], "source": source["name"],
                "target_namespace": out["namespace"], "target": out["name"], "job": job["name"],
                "runs": 0, "first_seq": record.seq}
            if row.get("last_seq", -1) >= record.seq:
                continue  # taken in already (a capture repeated after a crash)
            row.update(runs=row["runs"] + 1, last_seq=record.seq, last_event_time=time_us)
            puts[key] = json.dumps(row).encode()
        lineage = (out.get("facets") or {}).get("columnLineage") or {}
        for target_column, body in (lineage.get("fields") or {}).items():
            for field in body.get("inputFields") or []:
                kinds = ",".join(sorted({f"{t.get('type', '')}/{t.get('subtype', '')}".strip("/")
                                         for t in field.get("transformations") or []})) or None
                key = _key(COLUMNS, field["namespace"], field["name"], field["field"], out["namespace"], out["name"],
                           target_column)
                puts[key] = json.dumps({
                    "source_namespace": field["namespace"], "source": field["name"], "source_column": field["field"],
                    "target_namespace": out["namespace"], "target": out["name"], "target_column": target_column,
                    "transformation": kinds, "last_seq": record.seq}).encode()
    return puts


def read_table(store: Any, name: str) -> pa.Table:
    """``lineage.<name>`` as Arrow, read from the index (what the engine registers)."""
    schema = SCHEMAS[name]
    rows = [json.loads(value) for _, value in store.scan(_PREFIX[name])]
    for row in rows:
        for column in ("event_time", "last_event_time"):
            if row.get(column) is not None:
                row[column] = datetime.fromtimestamp(row[column] / 1e6, UTC)
    return pa.Table.from_pylist(rows, schema=schema)


class LineageIndex:
    """Keeps the index up to date from the commit log, on a thread of its own.

    Args:
        catalog: The catalog whose commits are indexed.
        build: The commit's OpenLineage events (the exporter's ``events_for``).
    """

    def __init__(self, catalog: RocksCatalog, build: EventBuilder, batch: int = 256) -> None:
        self.catalog = catalog
        self.store = catalog.store
        self.build = build
        self.batch = batch
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._caught_up = threading.Condition()
        self._indexing = threading.Lock()
        # Events can be built only once the exporter knows its settings (its start()).
        self.build_ready: Callable[[], bool] | None = None
        if not self.store.read_only:
            if self.store.get(CURSOR) is None:
                # From the oldest commit the log still holds: a new index learns what it can.
                self.catalog.log.set_hold(HOLD_NAME, max(0, self.catalog.log.log_start() - 1))
            catalog.hub.add_listener(lambda _record: self._wake.set())
            catalog.log.before_trim.append(self.catch_up)

    def start(self) -> LineageIndex:
        if self.store.read_only:
            return self
        self._thread = threading.Thread(target=self._run, name="icefloe-lineage-index", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.catch_up in self.catalog.log.before_trim:
            self.catalog.log.before_trim.remove(self.catch_up)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10.0)

    def cursor(self) -> int:
        raw = self.store.get(CURSOR)
        return keys.decode_u64(raw) if raw is not None else 0

    def wait_for(self, seq: int, timeout: float = 10.0) -> bool:
        """Wait until commit ``seq`` is indexed (a query right after a write sees it)."""
        self._wake.set()
        with self._caught_up:
            return self._caught_up.wait_for(lambda: self.cursor() >= seq or self._stop.is_set(), timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.catch_up()
            except Exception:
                logger.exception("lineage index update failed; will retry")
                self._stop.wait(1.0)
            self._wake.wait(5.0)
            self._wake.clear()

    def catch_up(self) -> None:
        """Index every record after the cursor (the worker, and a trim that must not wait)."""
        if self.build_ready is not None and not self.build_ready():
            return
        with self._indexing:  # one at a time: edge counts are read, then written
            self._catch_up()

    def _catch_up(self) -> None:
        while not self._stop.is_set():
            cursor = self.cursor()
            try:
                records = list(self.catalog.log.read(cursor, limit=self.batch))
            except CursorExpiredError as exc:
                logger.error("lineage index cursor %d expired (log starts at %d)", cursor, exc.log_start)
                self.store.write({CURSOR: keys.encode_u64(exc.log_start - 1)})
                continue
            if records:
                for record in records:  # one batch per commit: edge counts read what came before
                    puts = index_writes(self.store, record, self.build(record))
                    puts[CURSOR] = keys.encode_u64(record.seq)
                    self.store.write(puts, sync=False)
            with self._caught_up:
                self._caught_up.notify_all()
            if len(records) < self.batch:
                return
