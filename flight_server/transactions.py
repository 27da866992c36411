"""Flight SQL transactions: writes to any tables land together at COMMIT, or not at all.

A transaction lives in this server process (``TransactionManager``); the client holds only
its id, sealed like every other handle (``handles.HandleSigner``, purpose ``txn``) and bound to
the principal that began it, so an altered, forged or borrowed id is refused before anything
looks it up.

Writes inside a transaction run the ordinary SQL-write and ingest code against a
``TransactionCatalog``: it hands out tables whose metadata is the transaction's view of them
(the base the transaction first wrote on, plus what it staged), and its ``commit_table`` stages
instead of landing. Data files and manifests are written (and fsync'd) as usual, so a staged
snapshot is complete; only the catalog pointer does not move. At COMMIT every written table's
accumulated updates go to ``RocksCatalog.commit_tables`` in one RocksDB batch (one commit seq
per table, all with the transaction id in the record's ``extra``), guarded by "the table's main
branch is still at the snapshot this transaction based its writes on": a concurrent commit on a
written table makes COMMIT fail with ABORTED and lands nothing. Rollback, expiry, a client that
goes away or a killed server leave the staged files unreferenced; orphan removal takes them.

Reads see the catalog as it was at BEGIN (a RocksDB snapshot taken then: every table at the
snapshot it had at that moment, whenever the transaction first touches it) plus the
transaction's own writes: a table it wrote is read at its staged snapshot (the statement's
ticket then names the transaction, so DoGet reads the staged metadata too; after COMMIT the
same snapshot is in the catalog, after ROLLBACK it is gone and the ticket says so). A table
created after BEGIN (DDL lands at once, see the dispatcher) is read as of its first touch.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import uuid6
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from catalog import keys
from catalog.context import commit_context, current_commit_context
from catalog.metadata_ops import apply_updates
from flight_server import errors
from flight_server.security.handles import HandleSigner

logger = logging.getLogger("icefloe.transactions")

PURPOSE = "txn"
DEFAULT_TIMEOUT_S = 300.0
# Updates a data write makes (append, overwrite, delete); anything else (schema, properties,
# DDL) is refused inside a transaction rather than half-supported.
_DATA_UPDATES = (AddSnapshotUpdate, SetSnapshotRefUpdate)


# The transaction the current call runs in (set by the Flight SQL dispatcher for one call), so
# the engine pins what the transaction sees (``read_pins``) and reads its own staged snapshots
# (``staged_table``) without the many calls in between passing it along.
ACTIVE: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("icefloe_transaction", default=None)


def staged_table(catalog: Any, namespace: tuple[str, ...], name: str) -> Any:
    """The active transaction's view of a table it wrote (staged snapshots included), else None."""
    txn = ACTIVE.get()
    staged = txn.tables.get((*namespace, name)) if txn is not None else None
    if staged is None:
        return None
    return catalog._table(tuple(namespace), name, staged.base_location, staged.metadata)


def read_pins(catalog: Any, pins: Sequence[Any]) -> list[Any]:
    """A query's pins as the active transaction reads them (see the module doc): a table it
    wrote at its staged snapshot, any other at its snapshot at BEGIN. Unchanged outside one."""
    txn = ACTIVE.get()
    if txn is None:
        return list(pins)
    out = []
    for pin in pins:
        key = (*pin.namespace, pin.name)
        if getattr(pin, "kind", "data") != "data" or getattr(pin, "view", None) is not None:
            out.append(pin)  # time travel and metadata tables name their snapshot already
            continue
        staged = txn.tables.get(key)
        if staged is not None:
            snap = staged.metadata.current_snapshot()
            out.append(dataclasses.replace(pin, snapshot_id=snap.snapshot_id if snap else None,
                                           schema_id=staged.metadata.current_schema_id))
            continue
        if key not in txn.pins:
            txn.pins[key] = _at_begin(catalog, txn, pin)
        snapshot_id, schema_id = txn.pins[key]
        out.append(dataclasses.replace(pin, snapshot_id=snapshot_id, schema_id=schema_id))
    return out


def _at_begin(catalog: Any, txn: Transaction, pin: Any) -> tuple[int | None, int]:
    """(snapshot id, schema id) of ``pin``'s table as it was when ``txn`` began."""
    raw = txn.at_begin.get(keys.table_key(pin.namespace, pin.name)) if txn.at_begin is not None else None
    if raw is None:
        return pin.snapshot_id, pin.schema_id  # created after BEGIN: as of its first touch
    location = json.loads(raw)["metadata_location"]
    current = catalog.store.get(keys.table_key(pin.namespace, pin.name))
    if current is not None and json.loads(current)["metadata_location"] == location:
        return pin.snapshot_id, pin.schema_id  # unchanged since BEGIN: what the plan saw
    try:
        metadata = FromInputFile.table_metadata(catalog._load_file_io(location=location).new_input(location))
    except FileNotFoundError:
        raise errors.Aborted(
            f"table {'.'.join((*pin.namespace, pin.name))} changed since this transaction began and its state "
            "at BEGIN is no longer available; ROLLBACK and run the transaction again"
        ) from None
    snap = metadata.current_snapshot()
    return (snap.snapshot_id if snap else None), metadata.current_schema_id


@dataclass
class StagedTable:
    """One table a transaction wrote: its base and what it staged on top."""

    identifier: tuple[str, ...]
    base_location: str
    base_snapshot_id: int | None
    table_uuid: uuid.UUID
    metadata: TableMetadata
    updates: list[TableUpdate] = field(default_factory=list)
    sql: list[str] = field(default_factory=list)
    inputs: set[str] = field(default_factory=set)
    # Exact rows (added, deleted) when every statement knew them (copy-on-write rewrites say
    # so in the commit context; appends count from their snapshot summaries).
    added: int = 0
    deleted: int = 0


@dataclass
class Transaction:
    id: str
    principal: str | None
    started: float
    last_used: float
    state: str = "open"  # open | committing | committed | rolled back | expired | aborted
    tables: dict[tuple[str, ...], StagedTable] = field(default_factory=dict)
    # (snapshot id, schema id) each table is read at (snapshot None: empty table).
    pins: dict[tuple[str, ...], tuple[int | None, int]] = field(default_factory=dict)
    # The gRPC peer that began it (see ``TransactionManager.by_peer``).
    peer: str | None = None
    # The catalog database as it was at BEGIN (``RocksStore.snapshot``): reads resolve tables there.
    at_begin: Any = None
    lock: threading.RLock = field(default_factory=threading.RLock)


class TransactionManager:
    """Open transactions of this server, by id; expires idle ones."""

    def __init__(self, catalog: Any, signer: HandleSigner, timeout_s: float = DEFAULT_TIMEOUT_S,
                 lineage: Any = None) -> None:
        self.catalog = catalog
        self.signer = signer
        self.timeout_s = timeout_s
        self._lineage = lineage
        self._open: dict[str, Transaction] = {}
        # Ended transactions, remembered briefly so a later use says what happened to them:
        # id -> (state, principal, whether it had staged writes when it ended).
        self._ended: dict[str, tuple[str, str | None, bool]] = {}
        self._lock = threading.Lock()

    # -- ids ------------------------------------------------------------------------------

    def begin(self, principal: str | None, peer: str | None = None) -> bytes:
        self._expire()
        # A UUIDv7 (time-ordered; clients only ever hold it sealed): it is also the lineage
        # runId of the transaction's commits (catalog.lineage.events.commit_run_id).
        tid = uuid6.uuid7().hex
        now = time.monotonic()
        at_begin = self.catalog.store.snapshot()
        with self._lock:
            self._open[tid] = Transaction(tid, principal, now, now, peer=peer, at_begin=at_begin)
        logger.info("transaction %s begun by %s", tid, principal or "anonymous")
        return self.seal(tid, principal)

    def seal(self, tid: str, principal: str | None) -> bytes:
        # The principal is inside the MAC: another user cannot use (or end) this transaction.
        return self.signer.seal(PURPOSE, f"{tid}:{principal or ''}".encode())

    def get(self, sealed: bytes, principal: str | None) -> Transaction:
        """The open transaction ``sealed`` names, for ``principal``.

        Raises:
            errors.InvalidArgument: Not a transaction id this warehouse's servers issued.
            errors.PermissionDenied: Begun by another principal.
            errors.NotFound: Unknown here (ended long ago, or begun on another server / before a restart).
            errors.FailedPrecondition: Expired, committed, rolled back or aborted.
        """
        body = self.signer.open(PURPOSE, bytes(sealed), "transaction id")
        tid, _, owner = body.decode("utf-8", "replace").partition(":")
        if owner != (principal or ""):
            raise errors.PermissionDenied("this transaction was begun by another user")
        self._expire()
        with self._lock:
            txn = self._open.get(tid)
            ended = self._ended.get(tid)
        if txn is None and ended is not None and ended[0].startswith("expired") and not ended[2]:
            # An expired transaction that had staged nothing lost nothing: it goes on (with
            # fresh snapshots). ADBC keeps a transaction open whenever autocommit is off, so
            # otherwise every idle default DB-API connection would fail its next query.
            now = time.monotonic()
            with self._lock:
                self._ended.pop(tid, None)
                txn = self._open.setdefault(tid, Transaction(tid, ended[1], now, now,
                                                             at_begin=self.catalog.store.snapshot()))
            logger.info("transaction %s resumed after expiry (it had staged nothing)", tid)
        if txn is None:
            if ended is not None:
                raise errors.FailedPrecondition(f"transaction {tid[:8]} is {ended[0]}; begin a new one")
            raise errors.NotFound(
                f"transaction {tid[:8]} is not open on this server (it ended, or the server restarted); "
                "nothing of it was committed; begin a new one"
            )
        txn.last_used = time.monotonic()
        return txn

    def _end(self, txn: Transaction, state: str) -> None:
        had_writes = bool(txn.tables)
        txn.state = state
        txn.tables.clear()
        txn.at_begin = None  # releases the RocksDB snapshot
        with self._lock:
            self._open.pop(txn.id, None)
            self._ended[txn.id] = (state, txn.principal, had_writes)
            while len(self._ended) > 10_000:
                self._ended.pop(next(iter(self._ended)))

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [t for t in self._open.values() if now - t.last_used > self.timeout_s]
        for txn in idle:
            # Not while a statement of it runs (its lock is held): that is not idle.
            if txn.lock.acquire(blocking=False):
                try:
                    if txn.state == "open" and time.monotonic() - txn.last_used > self.timeout_s:
                        logger.info("transaction %s expired after %.0f s idle; nothing of it was committed",
                                    txn.id, self.timeout_s)
                        self._end(txn, f"expired (idle for more than {self.timeout_s:g} s); nothing of it was "
                                       "committed")
                finally:
                    txn.lock.release()

    def by_peer(self, peer: str | None, principal: str | None) -> bytes | None:
        """The sealed id of the one open transaction ``peer`` began as ``principal`` (else None)."""
        if not peer:
            return None
        with self._lock:
            found = [t for t in self._open.values() if t.peer == peer and t.principal == principal]
        return self.seal(found[0].id, principal) if len(found) == 1 else None

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    # -- use ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def using(self, sealed: bytes, principal: str | None) -> Iterator[Transaction]:
        """Hold the transaction for one statement (statements of one transaction run one at a time)."""
        txn = self.get(sealed, principal)
        with txn.lock:
            if txn.state != "open":
                raise errors.FailedPrecondition(f"transaction {txn.id[:8]} is {txn.state}; begin a new one")
            try:
                yield txn
            finally:
                txn.last_used = time.monotonic()

    def catalog_for(self, txn: Transaction) -> TransactionCatalog:
        return TransactionCatalog(self.catalog, txn)

    def find_open(self, sealed: bytes, principal: str | None) -> Transaction | None:
        """The open transaction ``sealed`` names for ``principal``, or None once it ended."""
        try:
            txn = self.get(sealed, principal)
        except (errors.NotFound, errors.FailedPrecondition):
            return None
        return txn if txn.state == "open" else None

    # -- end ------------------------------------------------------------------------------

    def rollback(self, sealed: bytes, principal: str | None) -> None:
        with self.using(sealed, principal) as txn:
            staged = sorted(".".join(k) for k in txn.tables)
            self._end(txn, "rolled back")
        logger.info("transaction %s rolled back (%d tables staged, nothing committed)", txn.id, len(staged))

    def commit(self, sealed: bytes, principal: str | None) -> list[Any]:
        """Land every written table in one catalog batch; returns the commit responses.

        Raises:
            errors.Aborted: A written table changed since the transaction based its writes on
                it; nothing landed and the transaction is over.
        """
        with self.using(sealed, principal) as txn:
            tables = list(txn.tables.values())
            if not tables:
                self._end(txn, "committed")
                return []
            changes: list[tuple[tuple[str, ...], Sequence[TableRequirement], Sequence[TableUpdate]]] = []
            fields: list[dict[str, Any]] = []
            for staged in tables:
                requirements: list[TableRequirement] = [
                    AssertTableUUID(uuid=staged.table_uuid),
                    AssertRefSnapshotId(ref="main", snapshot_id=staged.base_snapshot_id),  # type: ignore[call-arg]
                ]
                changes.append((staged.identifier, requirements, staged.updates))
                # job_name: the tables' events are one lineage run of one job (the runId is the
                # transaction id, see catalog.lineage.events.commit_run_id).
                extra: dict[str, Any] = {"transaction_id": txn.id, "job_name": "icefloe.transaction",
                                         "sql": "; ".join(staged.sql),
                                         "inputs": sorted(staged.inputs - {".".join(staged.identifier)}),
                                         "row_counts": {"added": staged.added, "deleted": staged.deleted}}
                fields.append({"extra": extra})
            try:
                with commit_context(principal=principal, operation=None):
                    responses = self.catalog.commit_tables(changes, record_fields=fields)
            except CommitFailedException:
                names = ", ".join(".".join(s.identifier) for s in tables)
                self._end(txn, "aborted by a conflicting commit")
                raise errors.Aborted(
                    f"transaction {txn.id[:8]}: a table it wrote ({names}) was changed by another commit since; "
                    "nothing was committed; run the transaction again"
                ) from None
            except NoSuchTableError as exc:
                self._end(txn, "aborted (a table it wrote was dropped)")
                raise errors.Aborted(f"transaction {txn.id[:8]}: {exc}; nothing was committed") from None
            self._end(txn, "committed")
        logger.info("transaction %s committed %d tables", txn.id, len(tables))
        return list(responses)


class TransactionCatalog:
    """The catalog as a write inside ``txn`` sees it: tables at the transaction's view, and
    commits staged in the transaction instead of landed. Everything else is the real catalog."""

    def __init__(self, real: Any, txn: Transaction) -> None:
        self._real = real
        self._txn = txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def load_table(self, identifier: Any) -> Any:
        ns, name = self._real._split(identifier)
        key = (*ns, name)
        staged = self._txn.tables.get(key)
        if staged is not None:
            table = self._real._table(ns, name, staged.base_location, staged.metadata)
        else:
            table = self._real.load_table(key)
            if key in self._txn.pins:
                self._check_pin(key, table)
        table.catalog = self  # its commits come back here
        return table

    def _check_pin(self, key: tuple[str, ...], table: Any) -> None:
        snap = table.metadata.current_snapshot()
        current = snap.snapshot_id if snap else None
        if current != self._txn.pins[key][0]:
            # The transaction read an older snapshot: a write based on the newer one would mix
            # two states; fail now rather than at COMMIT.
            raise errors.Aborted(
                f"table {'.'.join(key)} changed since this transaction first read it; "
                "ROLLBACK and run the transaction again"
            )

    def commit_table(self, table: Any, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        for update in updates:
            if not isinstance(update, _DATA_UPDATES):
                raise errors.Unimplemented(
                    "inside a transaction only data changes (INSERT, UPDATE, DELETE, ingest into existing "
                    "tables) are supported; run DDL outside it"
                )
        ns, name = self._real._split(table.name())
        key = (*ns, name)
        staged = self._txn.tables.get(key)
        if staged is None:
            snap = table.metadata.current_snapshot()
            staged = StagedTable(key, str(table.metadata_location), snap.snapshot_id if snap else None,
                                 table.metadata.table_uuid, table.metadata)
        for requirement in requirements:
            requirement.validate(staged.metadata)
        new = apply_updates(staged.metadata, tuple(updates), staged.base_location, creating=False)
        ctx = current_commit_context()
        exact = ctx.extra.get("row_counts")
        if isinstance(exact, dict):
            staged.added += int(exact.get("added", 0))
            staged.deleted += int(exact.get("deleted", 0))
        else:
            for update in updates:
                if isinstance(update, AddSnapshotUpdate) and update.snapshot.summary is not None:
                    summary = update.snapshot.summary
                    staged.added += int(summary.get("added-records") or 0)
                    staged.deleted += int(summary.get("deleted-records") or 0)
        if ctx.extra.get("sql"):
            staged.sql.append(str(ctx.extra["sql"]))
        staged.inputs.update(ctx.extra.get("inputs") or [])
        staged.metadata = new
        staged.updates.extend(updates)
        self._txn.tables[key] = staged
        self._txn.pins.setdefault(key, (staged.base_snapshot_id, staged.metadata.current_schema_id))
        return CommitTableResponse(metadata=new, metadata_location=staged.base_location)  # type: ignore[call-arg]

    @staticmethod
    def _delete_old_metadata(io: Any, base: Any, metadata: Any) -> None:
        """Nothing landed, so there is nothing old to delete."""
