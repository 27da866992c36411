"""Ingest connectors inside the server: Flight actions, one thread per connector, metrics.

Actions (``DoAction``, JSON bodies, JSON answers; roles in ``flight_server.security.roles``):

``icefloe.ingest.add``       ``{"name", "table", "source", "options", "paused"?, ...}`` (admin: it makes the
                             server read a folder or call a URL) -> the status
``icefloe.ingest.list``      -> ``[{"name", "table", "source", "origin", "state", "paused"}]``
``icefloe.ingest.status``    ``{"name"?}`` -> one status, or all
``icefloe.ingest.run``       ``{"name", "once": bool}``: once = one pass now, answered with what
                             it did; otherwise resume running in the background
``icefloe.ingest.pause`` / ``.resume`` / ``.remove``  ``{"name"}``
``icefloe.ingest.backfill``  ``{"name", "start", "end"}``: one pass over that range, now

Each connector runs in a thread of its own (``IngestRunner.run_forever``); a pass asked for with
``run --once`` or ``backfill`` runs in the calling RPC and waits for a background pass in flight
(one pass per connector at a time), so the two never commit from the same checkpoint.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.flight as flight
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from catalog import keys
from catalog.schema_policy import SchemaMismatchError
from flight_server import errors
from flight_server.ingest.specs import (
    ConnectorSpec,
    InvalidSpec,
    decode,
    encode,
    load_config,
    parse_spec,
    source_path_inside,
)
from icefloe.ingest.contract import BackfillRange, InvalidOptions, SourceDataError, SourceUnavailable, State
from icefloe.ingest.runner import IngestRunner, RunStats
from icefloe.ingest.sink import CatalogSink

if TYPE_CHECKING:
    from catalog import RocksCatalog
    from catalog.append import Appender
    from flight_server.config import Config
    from flight_server.observability.metrics import Metrics

logger = logging.getLogger("icefloe.ingest")

ADD, LIST, STATUS, RUN = "icefloe.ingest.add", "icefloe.ingest.list", "icefloe.ingest.status", "icefloe.ingest.run"
PAUSE, RESUME, REMOVE = "icefloe.ingest.pause", "icefloe.ingest.resume", "icefloe.ingest.remove"
BACKFILL = "icefloe.ingest.backfill"
MAX_BODY = 64 * 1024
JOIN_S = 10.0


@dataclass
class _Running:
    spec: ConnectorSpec
    runner: IngestRunner
    stop: threading.Event
    thread: threading.Thread | None = None


class IngestService:
    """The server's connectors (from RocksDB and the config file) and their actions."""

    ACTIONS = frozenset({ADD, LIST, STATUS, RUN, PAUSE, RESUME, REMOVE, BACKFILL})

    def __init__(self, catalog: RocksCatalog, appender: Appender, metrics: Metrics, config: Config) -> None:
        self._catalog = catalog
        self._config = config
        self._store = catalog.store
        self._appender = appender
        config_file = config.ingest_config
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._closed = False
        specs = load_config(config_file) if config_file else []
        names = {spec.name for spec in specs}
        for _key, raw in self._store.scan(keys.INGEST_DEFINITION):
            spec = decode(raw)
            if spec.name in names:
                logger.warning("ingest connector %s is defined in the config file and over Flight; the config "
                               "file's definition runs", spec.name)
                continue
            specs.append(spec)
        for spec in specs:
            try:
                self._check_source(spec)
                self._running[spec.name] = self._new_running(spec)
            except (InvalidSpec, errors.PermissionDenied) as exc:
                if spec.origin == "config":
                    raise InvalidSpec(f"[connectors.{spec.name}]: {exc}") from None
                # A stored definition this server cannot run (e.g. an option a newer version
                # dropped) must not stop the server: it is left out, loudly, and kept.
                logger.error("ingest connector %s cannot run and is left out: %s", spec.name, exc)
        metrics.add_levels(IngestCollector(self))

    def start(self) -> None:
        """Start a thread per connector (paused ones wait in it)."""
        with self._lock:
            for running in self._running.values():
                self._start_thread(running)

    def close(self) -> None:
        """Stop every connector's thread; a commit in flight finishes or does not land."""
        with self._lock:
            self._closed = True
            running = list(self._running.values())
        for item in running:
            item.stop.set()
        for item in running:
            if item.thread is not None:
                item.thread.join(JOIN_S)
                if item.thread.is_alive():
                    logger.warning("ingest connector %s did not stop within %.0fs", item.spec.name, JOIN_S)
                    continue
            _close_connector(item)

    # -- actions --------------------------------------------------------------------------------

    def do_action(self, context: flight.ServerCallContext, action: flight.Action, principal: str | None
                  ) -> Iterator[bytes]:
        body = self._body(action)  # the role (flight_server.security.roles) was checked by the server
        if action.type == ADD:
            return iter([_dump(self._add(body, principal))])
        if action.type == LIST:
            with self._lock:
                items = list(self._running.values())
            return iter([_dump([self._summary(item) for item in items])])
        if action.type == STATUS and body.get("name") is None:
            with self._lock:
                items = list(self._running.values())
            return iter([_dump([self._status(item) for item in items])])
        item = self._find(body)
        if action.type == STATUS:
            return iter([_dump(self._status(item))])
        if action.type == PAUSE:
            self._store.write({keys.INGEST_PAUSED + item.spec.name.encode(): b"1"})
            item.runner.set_state(State.PAUSED)
            return iter([_dump(self._status(item))])
        if action.type == RESUME or (action.type == RUN and not body.get("once")):
            self._store.write({}, deletes=(keys.INGEST_PAUSED + item.spec.name.encode(),))
            item.runner.set_state(State.STARTING)
            with self._lock:
                self._start_thread(item)
            return iter([_dump(self._status(item))])
        if action.type == REMOVE:
            return iter([_dump(self._remove(item))])
        if action.type == RUN:
            stats = self._pass(item, None)
            return iter([_dump({**self._status(item), "run": stats.to_json()})])
        start, end = body.get("start"), body.get("end")
        if not all(v is None or isinstance(v, str) for v in (start, end)):
            raise errors.InvalidArgument("backfill start and end must be strings (source positions) or null")
        stats = self._pass(item, BackfillRange(start, end))
        return iter([_dump({**self._status(item), "backfill": {"start": start, "end": end, **stats.to_json()}})])

    def list_actions(self) -> list[tuple[str, str]]:
        return [
            (ADD, "Add an ingest connector: {name, table, source, options} (admin)"),
            (LIST, "The ingest connectors"),
            (STATUS, "An ingest connector's status (checkpoint, rows, commits, lag, state): {name?}"),
            (RUN, "Run an ingest connector: {name, once}"),
            (PAUSE, "Pause an ingest connector: {name}"),
            (RESUME, "Resume an ingest connector: {name}"),
            (REMOVE, "Remove an ingest connector (its checkpoint stays in the table): {name} (admin)"),
            (BACKFILL, "Ingest a bounded source range again, idempotently: {name, start, end}"),
        ]

    # -- the work -----------------------------------------------------------------------------

    def _add(self, body: dict[str, Any], principal: str | None) -> dict[str, Any]:
        try:
            spec = parse_spec(body, origin="api", principal=principal)
        except InvalidSpec as exc:
            raise errors.InvalidArgument(str(exc)) from None
        self._check_source(spec)
        for table in spec.targets:
            if not self._catalog.table_exists(tuple(table.split("."))):
                raise errors.NotFound(f"table {table} does not exist; create it first")
        with self._lock:
            if spec.name in self._running:
                raise errors.AlreadyExists(f"ingest connector {spec.name} already exists")
            if body.get("paused") not in (None, True, False):
                raise errors.InvalidArgument("paused must be true or false")
            writes = {keys.INGEST_DEFINITION + spec.name.encode(): encode(spec)}
            if body.get("paused"):  # paused before its thread starts: it never runs a pass until resumed
                writes[keys.INGEST_PAUSED + spec.name.encode()] = b"1"
            self._store.write(writes)
            item = self._running[spec.name] = self._new_running(spec)
            self._start_thread(item)
        logger.info("ingest connector %s added: %s -> %s", spec.name, spec.source, spec.table)
        return self._status(item)

    def _remove(self, item: _Running) -> dict[str, Any]:
        if item.spec.origin == "config":
            raise errors.FailedPrecondition(f"ingest connector {item.spec.name} comes from the server's config file; "
                                            "remove it there (pause it meanwhile)")
        item.stop.set()
        if item.thread is not None:
            item.thread.join(JOIN_S)
        with item.runner.exclusive():  # no pass in flight once removed
            with self._lock:
                self._running.pop(item.spec.name, None)
            _close_connector(item)  # e.g. a replication stream holding its slot
            self._store.write({}, deletes=(keys.INGEST_DEFINITION + item.spec.name.encode(),
                                           keys.INGEST_PAUSED + item.spec.name.encode()))
        return {"name": item.spec.name, "removed": True}

    def _pass(self, item: _Running, backfill: BackfillRange | None) -> RunStats:
        try:
            return item.runner.run_once(backfill)
        except SourceUnavailable as exc:
            raise errors.Unavailable(f"ingest {item.spec.name}: {exc}") from None
        except InvalidOptions as exc:
            raise errors.InvalidArgument(f"ingest {item.spec.name}: {exc}") from None
        except (SourceDataError, SchemaMismatchError) as exc:
            raise errors.FailedPrecondition(f"ingest {item.spec.name}: {errors.first_line(exc)}; nothing was "
                                            "committed") from None

    def _new_running(self, spec: ConnectorSpec) -> _Running:
        sink = CatalogSink(self._appender, spec.table, spec.principal, spec.schema_policy, spec.tables)
        runner = IngestRunner(spec.name, spec.connector(), sink, spec.max_rows)
        return _Running(spec, runner, threading.Event())

    def _start_thread(self, item: _Running) -> None:
        if self._closed or (item.thread is not None and item.thread.is_alive()):
            return
        name = item.spec.name
        item.stop = threading.Event()
        item.thread = threading.Thread(target=self._loop, args=(item,), name=f"icefloe-ingest-{name}", daemon=True)
        item.thread.start()

    def _loop(self, item: _Running) -> None:
        try:
            item.runner.run_forever(item.stop, item.spec.poll_s, lambda: self._paused(item.spec.name))
        except Exception:  # never silently: the status says failed
            logger.exception("ingest connector %s stopped", item.spec.name)
            item.runner.set_state(State.FAILED, "stopped on an internal error (see the server log)")

    def _paused(self, name: str) -> bool:
        return self._store.get(keys.INGEST_PAUSED + name.encode()) is not None

    def _check_source(self, spec: ConnectorSpec) -> None:
        config = self._config
        forbidden = [config.warehouse_path, config.key_folder]
        catalog_path = getattr(config, "catalog_path", None)
        if catalog_path:
            forbidden.append(catalog_path)
        if source_path_inside(spec, [f for f in forbidden if f and "://" not in f]):
            raise errors.PermissionDenied("an ingest source may not read the server's warehouse or catalog folders")

    def _find(self, body: dict[str, Any]) -> _Running:
        name = body.get("name")
        if not isinstance(name, str):
            raise errors.InvalidArgument('this action needs {"name": "<connector>"}')
        with self._lock:
            found = self._running.get(name)
        if found is None:
            raise errors.NotFound(f"no ingest connector named {name}")
        return found

    @staticmethod
    def _body(action: flight.Action) -> dict[str, Any]:
        raw = action.body.to_pybytes() if action.body is not None else b""
        if len(raw) > MAX_BODY:
            raise errors.InvalidArgument(f"{action.type} body is larger than {MAX_BODY} bytes")
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise errors.InvalidArgument(f"{action.type} takes a JSON object") from None
        if not isinstance(body, dict):
            raise errors.InvalidArgument(f"{action.type} takes a JSON object")
        return body

    def _summary(self, item: _Running) -> dict[str, Any]:
        status = item.runner.status()
        return {"name": item.spec.name, "table": item.spec.table, "source": item.spec.source,
                "origin": item.spec.origin, "state": status.state.value, "paused": self._paused(item.spec.name)}

    def _status(self, item: _Running) -> dict[str, Any]:
        status = item.runner.status()
        paused = self._paused(item.spec.name)
        return {"name": item.spec.name, "table": item.spec.table, "tables": list(item.spec.targets),
                "source": item.spec.source, "source_uri": item.runner.connector.source_uri(),
                "origin": item.spec.origin,
                "state": State.PAUSED.value if paused else status.state.value, "message": status.message,
                "paused": paused, "checkpoint": {"step": status.step, "positions": status.positions},
                "rows": status.rows, "commits": status.commits, "lag_seconds": round(status.lag_seconds, 3),
                "pending": status.pending, "last_commit_seq": status.last_commit_seq, "passes": status.passes}

    def statuses(self) -> list[dict[str, Any]]:
        """Every connector's status (what ``icefloe ingest status`` prints), by name: the watch page."""
        with self._lock:
            items = sorted(self._running.items())
        return [self._status(item) for _, item in items]

    def snapshot(self) -> list[tuple[str, Any]]:
        with self._lock:
            return [(name, item.runner.status()) for name, item in self._running.items()]


class IngestCollector:
    """``icefloe_ingest_*`` families, read from the runners when ``/metrics`` is scraped."""

    def __init__(self, service: IngestService) -> None:
        self._service = service

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        rows = CounterMetricFamily("icefloe_ingest_rows", "Rows committed by ingest connectors since start",
                                   labels=["connector"])
        commits = CounterMetricFamily("icefloe_ingest_commits", "Commits made by ingest connectors since start",
                                      labels=["connector"])
        lag = GaugeMetricFamily("icefloe_ingest_lag_seconds", "Age of the oldest source data in a connector's last "
                                "commit when it landed", labels=["connector"])
        pending = GaugeMetricFamily("icefloe_ingest_pending", "Source units (files, pages) known and not yet "
                                    "ingested", labels=["connector"])
        step = GaugeMetricFamily("icefloe_ingest_checkpoint_step", "Commits in a connector's durable checkpoint",
                                 labels=["connector"])
        state = GaugeMetricFamily("icefloe_ingest_state", "1 for a connector's current state", labels=["connector",
                                                                                                        "state"])
        for name, status in self._service.snapshot():
            rows.add_metric([name], status.rows)
            commits.add_metric([name], status.commits)
            lag.add_metric([name], status.lag_seconds)
            pending.add_metric([name], status.pending if status.pending is not None else float("nan"))
            step.add_metric([name], status.step)
            state.add_metric([name, status.state.value], 1)
        yield from (rows, commits, lag, pending, step, state)


def _close_connector(item: _Running) -> None:
    try:
        item.runner.connector.close()
    except Exception:  # closing must not fail a remove or a shutdown
        logger.warning("ingest connector %s: close failed", item.spec.name, exc_info=True)


def _dump(body: Any) -> bytes:
    return json.dumps(body).encode("utf-8")
