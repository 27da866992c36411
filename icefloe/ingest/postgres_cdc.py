"""The Postgres CDC connector: one table's rows, then its changes, through logical replication.

**How it reads.** One replication stream (``icefloe.ingest.pg_stream``: ``START_REPLICATION``
with the built-in ``pgoutput`` plugin) stays open across the runner's passes; each pass takes
the transactions committed before it began, folded per key into one unit of whole transactions
(``icefloe.ingest.pg_batch``). The slot is confirmed (a standby status update) only in
``committed``, i.e. after the Iceberg commit holding those transactions landed with the
checkpoint (the last commit's end LSN) in the same RocksDB batch. A crash anywhere leaves the
slot at or behind the checkpoint; transactions at or before it are skipped when streamed again.
At-least-once reading + the checkpoint = exactly once in the target.

**Initial snapshot.** The slot is created first (its start LSN L), then the table is read in
primary-key order, a page per commit, in one REPEATABLE READ transaction whose visibility rides
in the checkpoint: stream transactions it saw are skipped exactly. If it is lost mid-way the
rest comes from another snapshot, and the stream's replay (from L) converges by key.

**Changes.** Inserts, updates, deletes and TRUNCATE, applied by the table's primary key (or all
columns with ``REPLICA IDENTITY FULL``; a table with neither is refused); one Iceberg commit
holds one or more whole source transactions, never part of one. A column added at the source
reaches the target through the table's schema policy. Backfill: ``icefloe.ingest.pg_backfill``.
"""

from __future__ import annotations

import json
import logging
import re
import select
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import pyarrow as pa

from icefloe.ingest.contract import (
    BackfillRange,
    Checkpoint,
    Connector,
    Envelope,
    Health,
    InvalidOptions,
    Op,
    ReportedHealth,
    SourceDataError,
    SourceUnavailable,
    State,
)
from icefloe.ingest.pg_backfill import KeyRangeBackfill, close_quietly
from icefloe.ingest.pg_batch import TRUNCATED, TransactionBatch
from icefloe.ingest.pg_positions import decode_wal, encode_wal, visible
from icefloe.ingest.pg_stream import ExportedSnapshot, ReplicationStream, StreamLost, StreamRefused
from icefloe.ingest.pg_tables import describe, source_tables
from icefloe.ingest.pgoutput import (
    Begin,
    Change,
    Commit,
    DecodeError,
    Relation,
    Truncate,
    decode,
    format_lsn,
    parse_lsn,
    relation_schema,
    rows_table,
)

logger = logging.getLogger("icefloe.ingest.postgres")
# Every source connection reads values in the text forms the decoder parses (pgoutput.converter).
SESSION_SETTINGS = ("TimeZone = 'UTC'", "DateStyle = 'ISO, YMD'", "bytea_output = 'hex'", "IntervalStyle = 'iso_8601'")

_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# peek_changes: the window of the SQL-function reader that streaming replaced; still accepted
# (ignored) so that connectors stored with it keep loading.
OPTIONS = {"dsn", "table", "tables", "publication", "slot", "snapshot", "snapshot_batch", "batch_ms",
           "connect_timeout", "idle_confirm_ms", "peek_changes"}
PARTITION = ""
CATCH_UP_S = 10.0  # a read waits this long at most for the walsender to reach the flush LSN
ASK_EVERY_S = 0.01  # while waiting for that, how often to ask where it is
STALL_S = 60.0  # inside a transaction: how long a silent stream may take before it is given up
WAIT_SLICE_S = 0.1  # between passes: how often the wait looks at the stop event


class PostgresCdcConnector(Connector):
    """``source = "postgres"``: see the module docstring and docs/ingestion.md."""

    kind = "postgres"
    known_options = frozenset(OPTIONS)
    confirms_idle = True  # the slot may recycle WAL that held nothing for our tables

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        if "tables" in self.options and "table" not in self.options:
            self.options["table"] = "-"  # checked below, with the mapping
        for required in ("dsn", "table", "publication", "slot"):
            if not isinstance(self.options.get(required), str) or not self.options[required]:
                raise InvalidOptions(f"the postgres source needs option {required!r} (a string)")
        try:
            import psycopg.conninfo
        except ImportError:
            raise InvalidOptions("the postgres source needs psycopg 3: pip install 'icefloe[postgres]'") from None
        try:
            params = psycopg.conninfo.conninfo_to_dict(self.options["dsn"])
        except psycopg.Error:
            raise InvalidOptions("option 'dsn' is not a valid libpq connection string or URI") from None
        self._password = str(params.get("password") or "")
        self._where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}/{params.get('dbname') or ''}"
        self.tables = source_tables(self.options)
        self.schema_name, self.table_name = self.tables[0].schema_name, self.tables[0].table_name
        names = [("table", v) for t in self.tables for v in (t.schema_name, t.table_name)]
        for label, value in (*names, ("publication", self.options["publication"]), ("slot", self.options["slot"])):
            if not _IDENT.fullmatch(value):
                raise InvalidOptions(f"option {label!r}: {value!r} must be a lower-case identifier "
                                     "(a-z, 0-9, _; 63 characters at most)")
        self.snapshot = _bool(self.options.get("snapshot", True), "snapshot")
        self.snapshot_batch = _int(self.options.get("snapshot_batch", 50_000), "snapshot_batch", 1, 10_000_000)
        self.batch_ms = _int(self.options.get("batch_ms", 200), "batch_ms", 1, 3_600_000)
        self.connect_timeout = _int(self.options.get("connect_timeout", 10), "connect_timeout", 1, 3600)
        self.idle_confirm_ms = _int(self.options.get("idle_confirm_ms", 10_000), "idle_confirm_ms", 0, 86_400_000)
        self._idle_at = 0.0  # when the last idle position was given (monotonic)
        self._snap_index = 0  # snapshot: which of ``tables`` is being read
        self._health = ReportedHealth()
        self._conn: Any = None
        self._phase = "snapshot"
        self._after_key: list[str] | None = None  # snapshot: the last key taken
        self._pos = 0  # stream: the end LSN of the last transaction yielded
        # The snapshot's visibility (xmin, xmax, in-progress xids, and the WAL insert LSN when it
        # was taken): stream transactions it saw are skipped, exactly. None: the snapshot's
        # pages came from more than one snapshot (a crash in between), so nothing is skipped
        # and replays converge by key instead.
        self._seen: dict[str, Any] | None = None
        self._snap_conn: Any = None  # holds the snapshot's REPEATABLE READ transaction
        self._exported: ExportedSnapshot | None = None  # the new slot's snapshot, until imported
        self._stream: ReplicationStream | None = None
        self._stream_relations: dict[int, Relation] = {}  # the stream sends each relation once
        # The stream's position after the last unit it gave with rows: a checkpoint anywhere from
        # there to ``_pos`` lets the stream go on (what lies between changed nothing).
        self._data_pos = 0
        self._backfill: KeyRangeBackfill | None = None

    # -- the contract ---------------------------------------------------------------------------

    def discover(self) -> pa.Schema:
        """The (first) table's schema; ``discover_tables`` gives every target's."""
        return self.discover_tables()[self.tables[0].target or ""]

    def discover_tables(self) -> dict[str, pa.Schema]:
        """Target -> the schema of the source table feeding it (``""``: the one table)."""
        with self._errors():
            self._describe()
        return {t.target or "": relation_schema(t.described()) for t in self.tables}

    def open(self, checkpoint: Checkpoint, backfill: BackfillRange | None = None) -> None:
        position = checkpoint.get(PARTITION)
        if backfill is not None:
            self._open_backfill(backfill, position)
            return
        if self._backfill is not None:
            self._backfill.close()
            self._backfill = None
        if position is not None and position.startswith("wal:") and self._stream is not None:
            lsn, _ = decode_wal(position)
            if self._data_pos <= lsn <= self._pos:
                # The stream is where the runner is (what lies between held nothing for the
                # table): go on reading it, nothing is decoded twice.
                self._health.set(Health(State.UP))
                return
        self._close_stream()
        with self._errors():
            self._describe()
            confirmed = self._ensure_slot(export=position is None and self.snapshot)
            if position is None:
                self._close_snapshot(keep_exported=True)
                self._phase, self._after_key, self._pos, self._seen = ("snapshot", None, 0, None) if self.snapshot \
                    else ("stream", None, confirmed, None)
                self._snap_index = 0
            elif position.startswith("snap:"):
                state = json.loads(position[5:])
                self._phase, self._after_key = "snapshot", state["after"]
                self._snap_index = int(state.get("t", 0))
                if self._snap_conn is None or state["seen"] is None or state["seen"] != self._seen:
                    # The snapshot these pages came from is gone: the rest comes from another.
                    self._close_snapshot()
                    self._seen = None
            elif position.startswith("wal:"):
                self._close_snapshot()
                self._phase = "stream"
                self._pos, self._seen = decode_wal(position)
                if confirmed > self._pos:
                    raise SourceDataError(
                        f"replication slot {self.options['slot']} is at {format_lsn(confirmed)}, past this connector's "
                        f"checkpoint {format_lsn(self._pos)}: changes in between were consumed by something else; "
                        "nothing was committed (recreate the target with a new slot to load the table again)")
            else:
                raise SourceDataError(f"unreadable postgres checkpoint position {position[:40]!r}")
        self._health.set(Health(State.UP))

    def read(self, max_rows: int) -> Iterator[Envelope]:
        with self._errors():
            if self._backfill is not None:
                yield from self._backfill.read(lambda: self._repeatable_read("icefloe-ingest-backfill"), max_rows)
            elif self._phase == "snapshot":
                yield from self._read_snapshot(max_rows)
            else:
                reader = self._read_stream(max_rows)
                try:
                    first = next(reader, None)
                except StreamLost as lost:
                    # A stream left idle past the server's wal_sender_timeout (a paused
                    # connector, a long commit) is closed by the server; when nothing of this
                    # read was given yet, start it again where the runner is and go on.
                    logger.info("replication stream of %s.%s lost (%s); starting it again", self.schema_name,
                                self.table_name, self.scrub(str(lost)))
                    self._close_stream()
                    reader = self._read_stream(max_rows)
                    first = next(reader, None)
                if first is not None:
                    yield first
                    yield from reader
        self._health.set(Health(State.UP))

    def committed(self, checkpoint: Checkpoint) -> None:
        position = checkpoint.get(PARTITION) or ""
        if not position.startswith("wal:"):
            return  # the snapshot's pages: the slot stays at its start until the snapshot is done
        lsn = decode_wal(position)[0]
        with self._errors():
            if self._stream is not None:
                self._stream.confirm(lsn)  # a standby status update: the slot's confirmed_flush_lsn
                return
            # No stream open (the snapshot's last page): the slot is not in use, move it by SQL.
            self._connection().execute(
                "SELECT pg_replication_slot_advance(slot_name, %s::pg_lsn) FROM pg_replication_slots "
                "WHERE slot_name = %s AND confirmed_flush_lsn < %s::pg_lsn AND NOT active",
                (format_lsn(lsn), self.options["slot"], format_lsn(lsn)))

    def wait(self, timeout_s: float, stop: threading.Event) -> None:
        stream = self._stream
        if stream is None:
            stop.wait(timeout_s)
            return
        if not stream.drained:
            return  # whole messages already buffered
        deadline = time.monotonic() + timeout_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                readable, _, _ = select.select([stream.fileno()], [], [], min(left, WAIT_SLICE_S))
            except (OSError, ValueError):  # closed by a pass on another thread meanwhile
                return
            if readable:
                return

    def health(self) -> Health:
        return self._health.get()

    def close(self) -> None:
        if self._backfill is not None:
            self._backfill.close()
            self._backfill = None
        self._close_stream()
        self._close_snapshot()
        close_quietly(self._conn)
        self._conn = None

    def source_uri(self) -> str:
        return f"postgres://{self._where}/{self.schema_name}.{self.table_name}"

    def table_sources(self) -> dict[str, str]:
        return {t.target: f"postgres://{self._where}/{t.qualified}" for t in self.tables if t.target is not None}

    # -- the source ------------------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            import psycopg

            self._conn = psycopg.connect(self.options["dsn"], autocommit=True, connect_timeout=self.connect_timeout,
                                         application_name="icefloe-ingest")
            for setting in SESSION_SETTINGS:
                self._conn.execute(f"SET {setting}")
        return self._conn

    def _close_snapshot(self, keep_exported: bool = False) -> None:
        close_quietly(self._snap_conn)  # a read-only transaction: nothing to keep
        self._snap_conn = None
        if not keep_exported:
            self._close_exported()

    def _close_exported(self) -> None:
        if self._exported is not None:
            self._exported.close()
            self._exported = None

    def _snapshot_connection(self) -> Any:
        """The connection holding the snapshot's transaction (taking the snapshot if new)."""
        if self._snap_conn is None or self._snap_conn.closed:
            conn = self._repeatable_read("icefloe-ingest-snapshot")
            if self._exported is not None and self._after_key is None and self._snap_index == 0:
                # The slot's own snapshot: it sees exactly what the slot will not stream.
                from psycopg import sql

                conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(self._exported.name)))
            self._close_exported()  # imported (or of no use now): the replication connection goes
            # The first statement of the transaction takes its snapshot.
            taken = conn.execute("SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text").fetchone()
            assert taken is not None
            snapshot, insert_lsn = taken
            self._snap_conn = conn
            if self._after_key is None and self._snap_index == 0:
                xmin, xmax, xip = snapshot.split(":")
                self._seen = {"xmin": int(xmin), "xmax": int(xmax),
                              "xip": sorted(int(x) for x in xip.split(",") if x), "until": parse_lsn(insert_lsn)}
        return self._snap_conn

    def _repeatable_read(self, name: str) -> Any:
        """A new connection whose next statement starts a read-only REPEATABLE READ transaction."""
        import psycopg

        conn = psycopg.connect(self.options["dsn"], connect_timeout=self.connect_timeout, application_name=name)
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        for setting in SESSION_SETTINGS:
            conn.execute(f"SET {setting}")
        conn.commit()
        return conn

    def _open_backfill(self, span: BackfillRange, position: str | None) -> None:
        """A backfill pass (``icefloe.ingest.pg_backfill``): the live stream is left as it is."""
        if self._backfill is not None and self._backfill.at(span, position):
            return  # the run's next page, from the same snapshot
        if self._backfill is not None:
            self._backfill.close()
            self._backfill = None
        if len(self.tables) > 1:
            raise InvalidOptions("a backfill of a connector feeding several tables is not supported; add a "
                                 "single-table connector for the table to backfill")
        with self._errors():
            self._describe()
        first = self.tables[0]
        self._backfill = KeyRangeBackfill(first.described(), self.schema_name, first.key, first.types, span, position,
                                          self.snapshot_batch)
        self._health.set(Health(State.UP))

    def _describe(self) -> None:
        """Check the server, each table, its key and the publication; remember the tables."""
        conn = self._connection()
        wal_level = conn.execute("SHOW wal_level").fetchone()[0]
        if wal_level != "logical":
            raise SourceDataError(f"the source server's wal_level is {wal_level}; logical replication needs "
                                  "wal_level = logical (postgresql.conf, then restart the server)")
        for table in self.tables:
            describe(conn, table, self.options["publication"])

    def _ensure_slot(self, export: bool = False) -> int:
        """The slot's confirmed LSN, creating the slot (pgoutput) when it does not exist; with
        ``export``, over the replication protocol, keeping its exported snapshot for the initial
        snapshot to import (``_snapshot_connection``)."""
        conn, slot = self._connection(), self.options["slot"]
        found = conn.execute("SELECT plugin, database, confirmed_flush_lsn::text FROM pg_replication_slots "
                             "WHERE slot_name = %s", (slot,)).fetchone()
        if found is None:
            if export:
                self._close_exported()
                self._exported = ExportedSnapshot(self.options["dsn"], slot, self.connect_timeout)
            else:
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            logger.info("created replication slot %s for %s.%s", slot, self.schema_name, self.table_name)
            found = conn.execute("SELECT plugin, database, confirmed_flush_lsn::text FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (slot,)).fetchone()
        database = conn.execute("SELECT current_database()").fetchone()[0]
        if found[0] != "pgoutput" or found[1] != database:
            raise SourceDataError(f"replication slot {slot} exists but is not a pgoutput slot of database {database}")
        return parse_lsn(found[2])

    def _read_snapshot(self, max_rows: int) -> Iterator[Envelope]:
        """One page of the table being read (``_snap_index``), all tables from one REPEATABLE
        READ snapshot; after the last page of the last table, the stream from the slot's start."""
        from psycopg import sql

        source = self.tables[self._snap_index]
        relation, conn = source.described(), self._snapshot_connection()
        limit = max(1, min(max_rows, self.snapshot_batch))
        # Qualified by the alias: ORDER BY a bare name would sort by the text output column.
        texts = sql.SQL(", ").join(sql.SQL("src.{}::text").format(sql.Identifier(c.name)) for c in relation.columns)
        keys = sql.SQL(", ").join(sql.SQL("src.{}").format(sql.Identifier(k)) for k in source.key)
        query = sql.SQL("SELECT {} FROM {}.{} AS src").format(texts, sql.Identifier(source.schema_name),
                                                             sql.Identifier(source.table_name))
        params: list[Any] = []
        if self._after_key is not None:
            bound = sql.SQL(", ").join(sql.SQL("%s::{}").format(sql.SQL(source.types[k])) for k in source.key)
            query += sql.SQL(" WHERE ({}) > ({})").format(keys, bound)
            params = list(self._after_key)
        query += sql.SQL(" ORDER BY {} LIMIT {}").format(keys, sql.Literal(limit))
        rows = conn.execute(query, params).fetchall()
        table = rows_table(relation, rows)
        # Several tables: pages are applied by key (a snapshot taken again converges) into
        # their own target; one table: appended, as before.
        labelled: dict[str, Any] = {"op": Op.UPDATE, "key": source.key, "table": source.target} \
            if source.target is not None else {}
        if len(rows) == limit or self._snap_index + 1 < len(self.tables):
            if len(rows) == limit:
                last = rows[-1]
                index = {c.name: i for i, c in enumerate(relation.columns)}
                self._after_key = [last[index[k]] for k in source.key]
            else:  # this table is done: the next one, from its start, in the same snapshot
                self._snap_index, self._after_key = self._snap_index + 1, None
            state: dict[str, Any] = {"after": self._after_key, "seen": self._seen}
            if self._snap_index:
                state["t"] = self._snap_index
            yield Envelope(table, PARTITION, "snap:" + json.dumps(state, separators=(",", ":")), **labelled)
            return
        # The last page: from here on, the stream from the slot's start (never advanced so far).
        self._close_snapshot()
        confirmed = self._ensure_slot()
        self._phase, self._pos = "stream", confirmed
        yield Envelope(table, PARTITION, encode_wal(confirmed, self._seen), **labelled)

    def _read_stream(self, max_rows: int) -> Iterator[Envelope]:
        """Transactions from the open replication stream, as one unit of whole transactions
        (``TransactionBatch``: every table they touched). The read ends when the walsender has
        sent everything committed before the read began (its keepalive says how far it decoded:
        a pass takes what the source had when it started), at ``max_rows`` changed keys, or when
        the stream pauses ``batch_ms`` after the unit's first transaction. When the read found
        nothing for our tables, an envelope without rows moves the position to where the
        walsender has decoded (at most every ``idle_confirm_ms``): the runner stores it and
        confirms the slot, so an idle table's slot does not hold WAL."""
        stream = self._stream_now()
        target = self._flush_lsn()
        batch = self._new_batch()
        relations: dict[int, Relation] = {}
        relations.update(self._stream_relations)
        txn: tuple[Begin, dict[int, list[tuple[Relation | None, Any]]]] | None = None
        give_up, unit_ends, asked = time.monotonic() + CATCH_UP_S, 0.0, 0.0
        ours = {t.described().oid for t in self.tables}
        while True:
            data = stream.next(0)  # what has arrived (keepalives are taken, and answered, here)
            if data is None:
                if txn is None:
                    now = time.monotonic()
                    if stream.decoded >= target or now >= give_up or (batch.transactions and now >= unit_ends):
                        break
                    if now - asked >= ASK_EVERY_S:
                        stream.ask_position()
                        asked = now
                data = stream.next(ASK_EVERY_S if txn is None else STALL_S)
                if data is None:
                    continue
            try:
                message = decode(data)
            except DecodeError as exc:
                raise SourceDataError(f"cannot decode the replication stream: {exc}") from None
            if isinstance(message, Relation):
                relations[message.oid] = message
                self._stream_relations[message.oid] = message
            elif isinstance(message, Begin):
                txn = (message, {})
            elif isinstance(message, Change) and txn is not None:
                relation = relations.get(message.relation_oid)
                if relation is not None and relation.oid in ours:
                    txn[1].setdefault(relation.oid, []).append((relation, message))
            elif isinstance(message, Truncate) and txn is not None:
                for oid in message.relation_oids:  # TRUNCATE a, b: each of ours, in this transaction
                    if oid in ours:
                        txn[1].setdefault(oid, []).append((None, TRUNCATED))
            elif isinstance(message, Commit) and txn is not None:
                begin, changes = txn
                txn = None
                stream.decoded = max(stream.decoded, message.end_lsn)
                if self._seen is not None and message.commit_lsn >= self._seen["until"]:
                    self._seen = None  # past every transaction the snapshot saw
                if begin.final_lsn < self._pos:
                    continue  # at or before the checkpoint: committed already
                if self._seen is not None and visible(begin.xid, self._seen):
                    changes = {}  # the snapshot holds its changes already
                if not batch.fits(changes):
                    yield from self._emit(batch)
                    batch = self._new_batch()
                if not batch.transactions:
                    unit_ends = time.monotonic() + self.batch_ms / 1000
                self._pos = message.end_lsn
                batch.add(begin.xid, message.commit_lsn, message.end_lsn, message.commit_time_us,
                          encode_wal(message.end_lsn, self._seen), changes)
                # Not cut by time here: while messages keep coming without a pause the
                # connector is behind, and one larger commit catches up sooner than many small
                # ones (a commit's cost is mostly fixed). The time cut is taken above, when the
                # stream pauses.
                if stream.decoded >= target or batch.rows() >= max_rows:
                    break
        if batch.transactions:
            yield from self._emit(batch)
        elif stream.decoded > self._pos and self._idle_due():
            # Every transaction before ``decoded`` has been read (the walsender sends a
            # transaction when it decodes its commit, before it moves past it) and none of it
            # is waiting for a commit: the position may move on without data.
            self._pos = stream.decoded
            self._idle_at = time.monotonic()
            yield Envelope(pa.table({}), PARTITION, encode_wal(self._pos, self._seen))
        stream.report_received()

    def _idle_due(self) -> bool:
        return time.monotonic() - self._idle_at >= self.idle_confirm_ms / 1000

    def _new_batch(self) -> TransactionBatch:
        return TransactionBatch({t.described().oid: (t.key, t.qualified, t.target, t.described())
                                 for t in self.tables})

    def _emit(self, batch: TransactionBatch) -> Iterator[Envelope]:
        envelopes = batch.envelopes(lambda n: encode_wal(batch.end_lsn, self._seen, n))
        if any(e.rows.num_rows or e.op is Op.TRUNCATE for e in envelopes):
            self._data_pos = batch.end_lsn
        elif not self._idle_due():
            return  # transactions of no interest: the position moves with the next data or idle turn
        else:
            self._idle_at = time.monotonic()
        yield from envelopes

    def _stream_now(self) -> ReplicationStream:
        """The replication stream, started at the position when none is open."""
        if self._stream is None:
            self._stream_relations = {}
            self._stream = ReplicationStream(self.options["dsn"], self.options["slot"], self.options["publication"],
                                             self._pos, self.connect_timeout)
            self._data_pos = self._pos
            logger.info("streaming %s.%s from slot %s at %s", self.schema_name, self.table_name, self.options["slot"],
                        format_lsn(self._pos))
        return self._stream

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _flush_lsn(self) -> int:
        row = self._connection().execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        return parse_lsn(row[0])

    # -- errors ----------------------------------------------------------------------------------

    def _errors(self) -> Any:
        return _Errors(self)

    def scrub(self, text: str) -> str:
        """``text`` without the DSN's password (errors and logs never show it)."""
        return text.replace(self._password, "***") if self._password else text


class _Errors:
    """Maps the client library's errors: connection trouble -> SourceUnavailable (retried),
    anything else the server refused -> SourceDataError; the password scrubbed from both."""

    def __init__(self, connector: PostgresCdcConnector) -> None:
        self.connector = connector

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, _tb: Any) -> Literal[False]:
        if exc is None:
            return False
        import psycopg

        if isinstance(exc, StreamRefused) and exc.sqlstate != "55006":  # 55006: the slot is in use: retried
            raise SourceDataError(f"postgres source {self.connector.source_uri()}: "
                                  f"{self.connector.scrub(str(exc))}") from None
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | StreamLost | StreamRefused):
            self.connector.close()
            message = self.connector.scrub(_first_line(exc))
            self.connector._health.set(Health(State.DOWN, message))
            raise SourceUnavailable(f"postgres source {self.connector.source_uri()}: {message}") from None
        if isinstance(exc, psycopg.Error):
            raise SourceDataError(f"postgres source {self.connector.source_uri()}: "
                                  f"{self.connector.scrub(_first_line(exc))}") from None
        if isinstance(exc, SourceDataError):
            self.connector._health.set(Health(State.FAILED, self.connector.scrub(str(exc))))
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):  # --option KEY=VALUE gives text
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise InvalidOptions(f"option {name!r} must be true or false")
    return value


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, str) and value.isdigit():  # --option KEY=VALUE gives text
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidOptions(f"option {name!r} must be an integer from {low} to {high}")
    return value
