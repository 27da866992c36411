"""The lineage outbox and the background worker that drains it.

Two stages, both off the commit path:

1. *Capture*: the worker reads commit-log records after the lineage cursor (the commit-log
   hold ``lineage``, ``keys.LINEAGE_CURSOR``), builds their events while the commit's
   metadata is fresh and writes them to the outbox (``keys.LINEAGE_OUTBOX``) together with the new cursor in one
   atomic batch. The cursor is a commit-log hold: ``CommitLog.trim`` never drops a record
   the worker has not captured.
2. *Send*: the worker sends outbox events in order through the openlineage-python client and
   deletes each one once the transport accepted it. A collector that is down leaves them in
   RocksDB, retried with exponential backoff, across restarts too. An event the collector
   rejects as invalid (HTTP 4xx) is retried a few times and then moved to the dead-letter range
   (``keys.LINEAGE_DEAD``) so that it cannot block the rest.

Writers never wait: the commit hub calls ``_on_commit`` (which only sets an Event) after each
landed commit. Failed writes are stored directly by ``report_failure`` (a write to the outbox;
a refused write has no commit-log record): ``FAIL`` for writes that were refused or failed,
``ABORT`` for writes the client cancelled or abandoned (exceptions of ``abort_errors``).

Delivery is at least once: an event sent just before a crash, and not yet deleted, is sent
again on restart with the same runId and content.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.view.metadata import ViewMetadata

from catalog import keys, views
from catalog.commit_log import CommitRecord, CursorExpiredError
from catalog.context import commit_context, current_commit_context
from catalog.lineage.events import (
    LineageSettings,
    build_commit_events,
    build_failure_events,
    check_unfinished_event_type,
    new_run_id,
    transaction_run_id,
)
from catalog.lineage.sender import OK, REJECTED, ChildSender, InProcessSender
from catalog.lineage.transport import ResolvedClient, resolve_client

if TYPE_CHECKING:
    from catalog.rocks_catalog import RocksCatalog

logger = logging.getLogger("icefloe.lineage")

_NO_KEY = b"\xff" * 64  # sorts after every outbox key

# The lineage cursor is this commit-log hold (keys.LINEAGE_CURSOR): trim keeps what is after it.
HOLD_NAME = "lineage"


def _now_us() -> int:
    return time.time_ns() // 1000


def outbox_key(run_id: str, index: int) -> bytes:
    """UUIDv7 bytes sort by time, so the outbox drains roughly in event-time order."""
    import uuid

    return keys.LINEAGE_OUTBOX + uuid.UUID(run_id).bytes + bytes([index])


class LineageExporter:
    """Captures every commit into the lineage outbox and sends it to the configured collector.

    Args:
        catalog: The (writable) catalog whose commits are exported.
        resolved: The OpenLineage client resolution (default: read from the environment).
        idle_wait_s: How often an idle worker looks at the outbox without being woken.
        max_backoff_s: Longest wait between delivery attempts while the collector is down.
        capture_batch: Commit-log records captured per batch.
        max_outbox: Failed-write events are dropped (with a warning) beyond this many waiting
            events, so a flood of refused writes cannot fill the disk; commits are never dropped.
        max_rejections: Attempts before an event the collector rejects goes to dead letters.
        send_in_child: Do the sending (serialisation, HTTP) in a child process so that it does
            not compete with writers for this process's GIL; False sends on the worker thread.
        send_batch: Events handed to the sender at a time.
        linger_s: After a wake-up, wait this long for more commits before working.
    """

    def __init__(
        self,
        catalog: RocksCatalog,
        resolved: ResolvedClient | None = None,
        *,
        idle_wait_s: float = 5.0,
        max_backoff_s: float = 30.0,
        capture_batch: int = 256,
        max_outbox: int = 100_000,
        max_rejections: int = 3,
        send_in_child: bool = True,
        send_batch: int = 64,
        linger_s: float = 0.05,
        abort_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.catalog = catalog
        # What ``track_write`` reports as ABORT (the client cancelled or went away) rather
        # than FAIL (the write was refused or failed); the front end names its own types.
        self.abort_errors = abort_errors
        self.store = catalog.store
        self.log = catalog.log
        self.resolved = resolved if resolved is not None else resolve_client()
        self.settings: LineageSettings | None = None
        self.idle_wait_s = idle_wait_s
        self.max_backoff_s = max_backoff_s
        self.capture_batch = capture_batch
        self.max_outbox = max_outbox
        self.max_rejections = max_rejections
        self.send_in_child = send_in_child
        self.send_batch = send_batch
        self.linger_s = linger_s
        self._sender: ChildSender | InProcessSender | None = None
        self.delivered = 0
        self.send_failures = 0
        self.dead_lettered = 0
        self.worker_cpu_s = 0.0  # CPU time of the worker thread so far (capture + send rounds)
        self.sender_cpu_s = 0.0  # CPU time of the sender child processes that have exited
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._rejections: dict[bytes, int] = {}
        self._metadata: OrderedDict[str, TableMetadata] = OrderedDict()
        self._build_lock = threading.Lock()
        self._collector_down = False
        self._outbox_size = 0
        # Sent events are deleted, and RocksDB iterators step over every deletion marker; so
        # scans start at ``_scan_from`` (nothing below it is pending). Writers that insert a
        # key lower it (``_inserted_floor`` covers inserts made while a send round runs).
        self._scan_from = keys.LINEAGE_OUTBOX
        self._inserted_floor = _NO_KEY
        if self.keeps_outbox and not self.store.read_only:
            # Register the cursor before any commit can land, so the first start exports
            # everything from here on (earlier history is not replayed).
            if self.store.get(keys.LINEAGE_CURSOR) is None:
                self.log.set_hold(HOLD_NAME, self.log.head())
            self._outbox_size = sum(1 for _ in self.store.scan(keys.LINEAGE_OUTBOX))
            catalog.hub.add_listener(self._on_commit)

    # -- state -------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self.resolved.state

    @property
    def enabled(self) -> bool:
        return self.resolved.state == "enabled"

    @property
    def keeps_outbox(self) -> bool:
        """Enabled, or configured but broken: events wait durably for a usable config."""
        return self.resolved.state in ("enabled", "invalid")

    def cursor(self) -> int | None:
        """Sequence of the last commit captured into the outbox (None when export is off)."""
        raw = self.store.get(keys.LINEAGE_CURSOR)
        return keys.decode_u64(raw) if raw is not None else None

    @property
    def outbox_depth(self) -> int:
        """Events waiting in the outbox, as counted in memory (no scan: for metrics)."""
        return self._outbox_size

    def dead_letters(self) -> int:
        """Events the collector rejected for good (kept under dead letters)."""
        return sum(1 for _ in self.store.scan(keys.LINEAGE_DEAD))

    @property
    def worker_alive(self) -> bool | None:
        """Whether the export worker runs; None when export is off (there is no worker)."""
        return None if self._thread is None else self._thread.is_alive()

    def pending(self) -> int:
        """Events waiting in the outbox."""
        return sum(1 for _ in self.store.scan(keys.LINEAGE_OUTBOX))

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, settings: LineageSettings) -> LineageExporter:
        self.settings = settings
        if self.store.read_only:
            logger.info("lineage export off: the catalog is open read-only")
            return self
        if self.resolved.state == "invalid":
            logger.error(
                "lineage export DISABLED: %s; events are kept and sent once the configuration is fixed",
                self.resolved.reason,
            )
            return self
        if not self.enabled:
            logger.info("lineage export off: %s", self.resolved.reason)
            if self.store.get(keys.LINEAGE_CURSOR) is not None:
                # Export is off on purpose: stop holding back commit-log trimming.
                self.log.release_hold(HOLD_NAME)
            return self
        logger.info(
            "lineage export on: %s transport, namespace %s (%d events waiting)",
            self.resolved.transport_kind,
            settings.namespace,
            self._outbox_size,
        )
        self._sender = ChildSender() if self.send_in_child else InProcessSender(self.resolved.client)
        self._thread = threading.Thread(target=self._run, name="icefloe-lineage", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the worker; events not yet sent stay in the outbox for the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(min(timeout, 2.0))
            if self._thread.is_alive() and isinstance(self._sender, ChildSender):
                # Stuck on a slow collector: end the child; the worker's pending read returns
                # and the unacknowledged events stay in the outbox for the next start.
                self._sender.interrupt()
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("lineage worker did not stop within %.0fs", timeout)
        if self._sender is not None:
            self._sender.close()
            self.sender_cpu_s = getattr(self._sender, "cpu_s", 0.0)
        if self._thread is not None:
            logger.info(
                "lineage worker stopped: %d events delivered, worker CPU %.3fs, sender CPU %.3fs",
                self.delivered,
                self.worker_cpu_s,
                self.sender_cpu_s,
            )
        if self.resolved.client is not None:
            with contextlib.suppress(Exception):
                self.resolved.client.close(timeout=1.0)

    def _on_commit(self, _record: CommitRecord) -> None:
        # Runs on the committing thread: only a flag, never I/O.
        self._wake.set()

    # -- failed writes -----------------------------------------------------------------

    def report_failure(
        self,
        namespace: tuple[str, ...] | str,
        table: str,
        operation: str,
        error: BaseException | str,
        *,
        principal: str | None = None,
        extra: dict[str, Any] | None = None,
        started_at_us: int | None = None,
        event_type: str = "FAIL",
    ) -> str | None:
        """Store the ``START``/``FAIL`` events of a refused or failed write; return its runId.

        ``event_type="ABORT"``: the write did not fail but was cancelled or abandoned by its
        client (a stream that broke off); it still commits nothing.

        Cheap and safe to call from any writer thread: one RocksDB write, no network.
        Returns None when export is off (or the outbox is full).

        Raises:
            ValueError: If ``event_type`` is neither ``FAIL`` nor ``ABORT``.
        """
        check_unfinished_event_type(event_type)
        if not self.keeps_outbox or self.store.read_only or self._stop.is_set():
            return None
        settings = self.settings
        if settings is None:
            return None
        with self._lock:
            if self._outbox_size >= self.max_outbox:
                logger.warning("lineage outbox full (%d events); failure event dropped", self._outbox_size)
                return None
            self._outbox_size += 2
        levels = tuple(namespace.split(".")) if isinstance(namespace, str) else tuple(namespace)
        message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        now = _now_us()
        run_id = new_run_id()
        events = build_failure_events(
            settings,
            run_id=run_id,
            namespace=levels,
            table=table,
            operation=operation,
            error=message,
            started_at_us=started_at_us or now,
            failed_at_us=now,
            principal=principal,
            extra=extra,
            columns_of=self._columns_of,
            event_type=event_type,
        )
        entries = {outbox_key(run_id, i): json.dumps(e).encode("utf-8") for i, e in enumerate(events)}
        with self._lock:
            self.store.write(entries)
            self._inserted_floor = min(self._inserted_floor, min(entries))
        self._wake.set()
        return run_id

    @contextlib.contextmanager
    def track_write(
        self,
        namespace: tuple[str, ...] | str,
        table: str,
        operation: str,
        *,
        principal: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Iterator[None]:
        """Run a write; report it as a failed run if the block raises (then re-raise).

        The run ends with ``ABORT`` when the exception is one of ``abort_errors`` (the client
        cancelled or abandoned the write), otherwise with ``FAIL``.

        Also records when the write began (``extra["started_at_us"]``) and ``extra`` in the
        commit context, so the commits it makes carry them into their lineage events.
        """
        started = _now_us()
        with commit_context(extra={"started_at_us": started, **(extra or {})}):
            try:
                yield
            except Exception as exc:
                ctx = current_commit_context()
                try:
                    self.report_failure(
                        namespace,
                        table,
                        operation,
                        exc,
                        principal=principal or ctx.principal,
                        extra=ctx.extra,
                        started_at_us=started,
                        event_type="ABORT" if isinstance(exc, self.abort_errors) else "FAIL",
                    )
                except Exception:  # reporting must never change the writer's outcome
                    logger.exception("could not record a failed write for lineage")
                raise

    # -- worker ------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.0
        next_send = 0.0
        while not self._stop.is_set():
            self.worker_cpu_s = time.thread_time()
            wait = max(0.0, next_send - time.monotonic()) if backoff else self.idle_wait_s
            woken = self._wake.wait(wait)
            if woken and self.linger_s:
                # Let a burst of commits gather: one capture batch and one send round for
                # many commits costs writers less than a round per commit.
                self._stop.wait(self.linger_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._capture()
            except Exception:
                logger.exception("lineage capture failed; will retry")
            if time.monotonic() < next_send:
                continue
            try:
                delivered_all = self._send_pending()
            except Exception:
                logger.exception("lineage delivery failed unexpectedly; will retry")
                delivered_all = False
            if delivered_all:
                backoff = 0.0
                next_send = 0.0
            else:
                backoff = min(self.max_backoff_s, max(0.5, backoff * 2))
                next_send = time.monotonic() + backoff
        self.worker_cpu_s = time.thread_time()

    def _capture(self) -> None:
        assert self.settings is not None
        while not self._stop.is_set():
            cursor = keys.decode_u64(self.store.get(keys.LINEAGE_CURSOR))
            try:
                records = list(self.log.read(cursor, limit=self.capture_batch))
            except CursorExpiredError as exc:
                logger.error(
                    "lineage cursor %d expired (log starts at %d): commits in between are not exported",
                    cursor,
                    exc.log_start,
                )
                self.store.write({keys.LINEAGE_CURSOR: keys.encode_u64(exc.log_start - 1)})
                continue
            if not records:
                return
            puts: dict[bytes, bytes] = {}
            for record in records:
                events = self.events_for(record)
                run_id = events[0]["run"]["runId"]
                # A transaction's commits share one run: each commit's events get their own
                # outbox slots (by seq), in commit order within a capture.
                base = 2 * (record.seq % 100) if transaction_run_id(record) is not None else 0
                for index, event in enumerate(events):
                    puts[outbox_key(run_id, base + index)] = json.dumps(event).encode("utf-8")
            puts[keys.LINEAGE_CURSOR] = keys.encode_u64(records[-1].seq)
            # Not fsync'd on its own: the next commit's fsync (or a clean close) makes it
            # durable, and if it is lost the cursor is lost with it and capture repeats.
            self.store.write(puts, sync=False)
            with self._lock:
                self._outbox_size += len(puts) - 1
                self._scan_from = min(self._scan_from, min(k for k in puts if k.startswith(keys.LINEAGE_OUTBOX)))
            if len(records) < self.capture_batch:
                return

    def _send_pending(self) -> bool:
        """Send what is waiting; True when the outbox was drained (or the worker is stopping)."""
        assert self._sender is not None
        while not self._stop.is_set():
            with self._lock:
                self._inserted_floor = _NO_KEY
                start = self._scan_from
            batch = list(itertools.islice(self.store.scan(keys.LINEAGE_OUTBOX, start), self.send_batch))
            if not batch:
                self._advance_scan_from(start)
                return True
            results = self._sender.send([value for _, value in batch])
            sent: list[bytes] = []
            try:
                if not self._handle_results(batch, results, sent):
                    return False
            finally:
                if sent:
                    self.store.write({}, tuple(sent), sync=False)
                    with self._lock:
                        self._outbox_size -= len(sent)
                    self.delivered += len(sent)
                    # Everything up to the last sent key is gone: later scans seek past the
                    # deletion markers instead of stepping over each of them.
                    self._advance_scan_from(max(sent) + b"\x00")
        return True

    def _advance_scan_from(self, candidate: bytes) -> None:
        """Move the scan start to ``candidate``, unless a writer inserted a key below it meanwhile."""
        with self._lock:
            self._scan_from = min(candidate, self._inserted_floor)

    def _handle_results(
        self, batch: list[tuple[bytes, bytes]], results: list[tuple[str, str]], sent: list[bytes]
    ) -> bool:
        """Sort one send round's outcomes; False when the rest must wait (collector down)."""
        for (key, value), (status, detail) in zip(batch, results, strict=True):
            if status == OK:
                sent.append(key)
                if self._collector_down:
                    self._collector_down = False
                    logger.info("lineage collector reachable again; delivering waiting events")
            elif status == REJECTED:
                if not self._reject(key, value, detail):
                    return False
            else:
                self.send_failures += 1
                if not self._collector_down:
                    self._collector_down = True
                    logger.warning("lineage collector unreachable (%s); events wait in the outbox", detail)
                return False
        return True

    def _reject(self, key: bytes, value: bytes, detail: str) -> bool:
        """Count a rejection; True once the event was moved to dead letters."""
        attempts = self._rejections.get(key, 0) + 1
        if attempts < self.max_rejections:
            self._rejections[key] = attempts
            logger.warning(
                "lineage collector rejected an event (%s); attempt %d of %d",
                detail,
                attempts,
                self.max_rejections,
            )
            return False
        self._rejections.pop(key, None)
        dead = keys.LINEAGE_DEAD + key[len(keys.LINEAGE_OUTBOX) :]
        self.store.write({dead: value}, (key,))
        with self._lock:
            self._outbox_size -= 1
        self.dead_lettered += 1
        logger.error("lineage collector rejected an event %d times (%s); moved to dead letters", attempts, detail)
        return True

    # -- metadata --------------------------------------------------------------------------

    def events_for(self, record: CommitRecord) -> list[dict[str, Any]]:
        """One commit's events as capture builds them (the lineage index keeps them too)."""
        assert self.settings is not None, "start() first"
        with self._build_lock:  # the metadata cache is shared with the worker's capture
            return build_commit_events(record, self._metadata_for(record), self.settings, self._columns_of,
                                       self._view_for(record))

    def _metadata_for(self, record: CommitRecord) -> TableMetadata | None:
        location = record.metadata_location
        if not location or record.extra.get("kind") == "view":  # view metadata is no table metadata
            return None
        # The catalog keeps the latest metadata of each table parsed; right after a commit it
        # is the one this record wrote, so the worker rarely parses anything.
        cache: dict[Any, tuple[str, TableMetadata]] = getattr(self.catalog, "_metadata_cache", {})
        cached = cache.get((record.namespace, record.table))
        if cached is not None and cached[0] == location:
            return cached[1]
        if cached is not None and record.added_rows is not None and record.snapshot_id is not None:
            # A later metadata still holds this commit's snapshot, and the snapshot names its
            # schema: no need to parse the older file (the builder reads both by snapshot id).
            if cached[1].snapshot_by_id(record.snapshot_id) is not None:
                return cached[1]
        if location in self._metadata:
            return self._metadata[location]
        try:
            io = self.catalog._load_file_io(location=location)
            metadata: TableMetadata = FromInputFile.table_metadata(io.new_input(location))
        except Exception as exc:
            logger.warning(
                "metadata of commit %d is no longer readable (%s); its events carry no schema",
                record.seq,
                type(exc).__name__,
            )
            return None
        self._metadata[location] = metadata
        while len(self._metadata) > 64:
            self._metadata.popitem(last=False)
        return metadata

    def _view_for(self, record: CommitRecord) -> ViewMetadata | None:
        """The view metadata a view's commit wrote (None for other commits, a drop, or a file
        no longer readable: the events then carry no schema or query lineage)."""
        location = record.metadata_location
        if not location or record.extra.get("kind") != "view" or record.operation == "view-drop":
            return None
        try:
            return views.read_metadata(self.catalog, location)
        except Exception as exc:
            logger.warning("view metadata of commit %d is no longer readable (%s); its events carry no schema",
                           record.seq, type(exc).__name__)
            return None

    def _columns_of(self, name: str) -> list[str] | None:
        try:
            return [f.name for f in self.catalog.load_table(name).schema().fields]
        except Exception:
            return None
