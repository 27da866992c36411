"""What an operator asks of a running server: health, status, tables, lineage of a table.

One place reads these from the components, for every way they are asked: the Flight actions
``icefloe.health`` / ``icefloe.status`` (``icefloe status``), the HTTP endpoints ``/healthz``,
``/readyz`` and the watch page's JSON (``flight_server.http.ops``), and the metrics' levels.

Nothing here returns a server path or a setting: tables are named, never located.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow.flight as flight

from catalog.lineage import index as lineage_index
from catalog.maintenance import catalog_tables
from flight_server import __version__, errors
from flight_server.observability.metrics import LiveCollector, Metrics, folder_bytes
from flight_server.security import roles

if TYPE_CHECKING:
    from catalog import RocksCatalog
    from catalog.commit_log import CommitRecord
    from catalog.lineage import LineageExporter
    from flight_server.engine.engine import Engine
    from flight_server.feed.fanout import FanOut

HEALTH_ACTION = "icefloe.health"
STATUS_ACTION = "icefloe.status"
# Commit-log records read (newest first) to find each table's last commit and its lineage.
RECENT_RECORDS = 5000
MAX_TABLES = 1000


def iso_time(committed_at_us: int) -> str:
    return datetime.fromtimestamp(committed_at_us / 1e6, UTC).isoformat().replace("+00:00", "Z")


def event_json(record: CommitRecord) -> dict[str, Any]:
    """A commit as the feed's event fields (without ``metadata_location``: a server path)."""
    return {
        "seq": record.seq, "committed_at": iso_time(record.committed_at_us),
        "namespace": ".".join(record.namespace), "table": record.table, "operation": record.operation,
        "snapshot_id": record.snapshot_id, "added_rows": record.added_rows, "deleted_rows": record.deleted_rows,
        "added_files": record.added_files, "principal": record.principal,
        "removed_files": record.removed_files, "data_change": record.data_change,
    }


# Integers JavaScript cannot hold exactly (snapshot ids are random 63-bit numbers).
_JS_SAFE = 2**53 - 1


def for_browser(body: Any) -> Any:
    """``body`` with every integer beyond JavaScript's exact range as a string, for the page."""
    if isinstance(body, dict):
        return {key: for_browser(value) for key, value in body.items()}
    if isinstance(body, list):
        return [for_browser(value) for value in body]
    if isinstance(body, int) and not isinstance(body, bool) and abs(body) > _JS_SAFE:
        return str(body)
    return body


class Operations:
    """Health, status and the watch page's views, over the components they read.

    Args:
        catalog: The server's catalog.
        lineage: The lineage exporter (outbox depth, worker liveness).
        engine: The SQL engine (queries running and queued).
        fanout: The feed's fan-out (subscribers written live).
        metrics: The server's metrics (start time; levels are registered into it).
        authorize: The server's role check (``Authorizer.authorize``).
    """

    ACTIONS = frozenset({HEALTH_ACTION, STATUS_ACTION})

    def __init__(self, catalog: RocksCatalog, lineage: LineageExporter, engine: Engine, fanout: FanOut,
                 metrics: Metrics, authorize: Callable[[flight.ServerCallContext, str], str | None]) -> None:
        self.catalog = catalog
        self.lineage = lineage
        # Set by the server: the lineage index caught up (lineage_graph), the connectors' status.
        self.lineage_ready: Callable[[], Any] | None = None
        self.ingest_status: Callable[[], list[dict[str, Any]]] = list
        self.engine = engine
        self.fanout = fanout
        self.metrics = metrics
        self._authorize = authorize
        hub = catalog.hub
        hub.add_listener(metrics.on_commit)
        rocksdb = catalog.store.path
        metrics.add_levels(LiveCollector(metrics.started, {
            "icefloe_queries_running": ("Queries DuckDB is executing", engine.watchdog.running_count, None),
            "icefloe_queries_queued": ("Queries waiting for a free DuckDB slot", lambda: engine.slots.waiting, None),
            "icefloe_feed_subscribers": ("Feed streams, by path: live (fan-out) or log (catching up)",
                                         self.subscribers, "path"),
            "icefloe_lineage_outbox_depth": ("Lineage events waiting to be sent", lambda: lineage.outbox_depth, None),
            "icefloe_lineage_dead_letters": ("Lineage events the collector rejected for good",
                                             self._dead_letters, None),
            "icefloe_catalog_commit_seq": ("The catalog's commit sequence head", self.head, None),
            "icefloe_rocksdb_size_bytes": ("Bytes of the catalog's RocksDB folder", lambda: folder_bytes(rocksdb),
                                           None),
            "icefloe_ready": ("1 when ready to serve (catalog open, lineage worker alive)",
                              lambda: 1 if self.health()["ready"] else 0, None),
        }))

    # -- reads ----------------------------------------------------------------------------

    def _open(self) -> bool:
        return not self.catalog.store.closed

    def head(self) -> int:
        """The commit sequence head.

        Raises:
            errors.Unavailable: The catalog is closed.
        """
        if not self._open():
            raise errors.Unavailable("the catalog is closed")
        return self.catalog.log.head()

    def _dead_letters(self) -> int:
        if not self._open():
            raise errors.Unavailable("the catalog is closed")
        return self.lineage.dead_letters()

    def subscribers(self) -> dict[str, int]:
        total = self.catalog.hub.subscriber_count
        live = min(total, self.fanout.attached_count)
        return {"live": live, "log": total - live}

    def health(self) -> dict[str, Any]:
        """``{"alive": True, "ready": bool, "checks": {...}}``: ready = the catalog is open and
        the lineage worker runs (or export is off, so there is none)."""
        catalog_ok = self._open()
        worker = self.lineage.worker_alive
        checks = {
            "catalog": "open" if catalog_ok else "closed",
            "lineage_worker": "off" if worker is None else ("alive" if worker else "dead"),
        }
        return {"alive": True, "ready": catalog_ok and worker is not False, "checks": checks}

    def recent(self, limit: int = RECENT_RECORDS) -> list[CommitRecord]:
        """The last ``limit`` commit records, oldest first."""
        head = self.head()
        after = max(self.catalog.log.log_start() - 1, head - limit)
        return list(self.catalog.log.read(after))

    def tables(self) -> list[dict[str, Any]]:
        """Every table with its row count, current snapshot and last commit (when still in the
        recent log), sorted by name.

        Raises:
            errors.Unavailable: The catalog is closed.
        """
        if not self._open():
            raise errors.Unavailable("the catalog is closed")
        last: dict[str, CommitRecord] = {r.qualified_name: r for r in self.recent()}
        out = []
        for ident in catalog_tables(self.catalog)[:MAX_TABLES]:
            name = ".".join(ident)
            rows: int | None = None
            snapshot_id: int | None = None
            try:
                snapshot = self.catalog.load_table(ident).current_snapshot()
            except Exception:  # dropped meanwhile, or unreadable metadata: still listed
                snapshot = None
            if snapshot is not None:
                snapshot_id = snapshot.snapshot_id
                total = (snapshot.summary.additional_properties if snapshot.summary else {}).get("total-records")
                rows = int(total) if total is not None else None
            record = last.get(name)
            out.append({
                "name": name, "rows": rows if snapshot is not None else 0, "snapshot_id": snapshot_id,
                "last_commit": event_json(record) if record is not None else None,
            })
        return out

    def lineage_graph(self, table: str) -> dict[str, Any]:
        """The tables ``table`` was written from and the tables written from it (one hop each
        way), as nodes and edges, from the lineage index (``catalog.lineage.index``).

        Raises:
            errors.NotFound: No such table.
        """
        if not self.catalog.table_exists(table):
            raise errors.NotFound(f"table {table} does not exist")
        if self.lineage_ready is not None:
            self.lineage_ready()
        edges: set[tuple[str, str]] = set()
        # The lineage index (icefloe.lineage.edges): every commit the log ever held, not only
        # recent ones; external sources (a connector's folder) are nodes too.
        for row in lineage_index.read_table(self.catalog.store, "edges").to_pylist():
            source, target = row["source"], row["target"]
            if table in (source, target) and source != target:
                edges.add((source, target))
        nodes = sorted({table, *(n for edge in edges for n in edge)})
        return {"table": table, "nodes": nodes, "edges": [{"from": a, "to": b} for a, b in sorted(edges)]}

    def ingest(self) -> list[dict[str, Any]]:
        """The connectors this server runs: state, rows, lag, checkpoint, last error."""
        return self.ingest_status()

    def status(self) -> dict[str, Any]:
        """What ``icefloe status`` prints."""
        head = self.head()
        return {
            "version": __version__,
            "started_at": datetime.fromtimestamp(self.metrics.started, UTC).isoformat().replace("+00:00", "Z"),
            "uptime_s": round(time.time() - self.metrics.started, 1),
            "commit_head": head,
            "log_start": self.catalog.log.log_start(),
            "tables": self.tables(),
            "feed_subscribers": self.subscribers(),
            "lineage": {"state": self.lineage.state, "outbox_depth": self.lineage.outbox_depth,
                        "dead_letters": self.lineage.dead_letters()},
            "queries": {"running": self.engine.watchdog.running_count(), "queued": self.engine.slots.waiting},
            "health": self.health(),
        }

    # -- Flight actions -----------------------------------------------------------------------

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        """``icefloe.health`` (role read): the health JSON; ``icefloe.status`` (role admin): the
        status JSON. Both take an empty body."""
        if action.body is not None and action.body.size and action.body.to_pybytes().strip() not in (b"", b"{}"):
            raise errors.InvalidArgument(f"{action.type} takes no body (or {{}})")
        if action.type == HEALTH_ACTION:
            self._authorize(context, roles.action_role(HEALTH_ACTION))
            return iter([json.dumps(self.health()).encode()])
        self._authorize(context, roles.action_role(STATUS_ACTION))
        return iter([json.dumps(self.status()).encode()])

    def list_actions(self) -> list[tuple[str, str]]:
        return [
            (HEALTH_ACTION, "Liveness and readiness (catalog open, lineage worker alive), as JSON"),
            (STATUS_ACTION, "Version, uptime, tables, commit head, feed subscribers, lineage outbox (admin)"),
        ]
