"""A logical replication stream kept open: PostgreSQL's streaming replication protocol.

psycopg 3's connection classes cannot enter a COPY BOTH exchange, but its libpq wrapper
(``psycopg.pq``) can: a connection made with ``replication=database`` runs ``START_REPLICATION
SLOT s LOGICAL lsn (proto_version '1', publication_names 'p')`` and then trades CopyData
messages with the walsender (libpq does the login, TLS and SCRAM as for any connection):

- from the server, ``w`` (XLogData: start, end, clock, then one ``pgoutput`` message) and ``k``
  (a keepalive: how far the walsender has decoded the WAL, and whether it wants an answer);
- to the server, ``r`` (a standby status update: written / flushed / applied LSN, clock, and
  whether we want a keepalive back).

Only the *flushed* LSN moves the slot (``confirmed_flush_lsn``); the connector reports there
the checkpoint of the last Iceberg commit that landed, never more. As *written* it reports
what it received, which keeps the walsender from sending a keepalive each time it waits for
WAL (it does while both are behind what it sent).

The walsender's position answers "have I got everything committed before X?": it sends a
transaction's messages when it decodes the commit record and only then moves past it, on the
same ordered connection. So once a keepalive says it decoded up to the server's WAL flush
position read at some moment, every transaction committed before that moment has arrived.
"""

from __future__ import annotations

import select
import struct
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg.pq.abc import PGconn

PG_EPOCH_US = 946_684_800_000_000
STATUS_EVERY_S = 10.0  # well inside wal_sender_timeout (60 s by default)
_STATUS = struct.Struct("!cQQQqB")
_XLOG_HEADER = 25  # "w", start, end, clock
_KEEPALIVE = struct.Struct("!QqB")


class StreamLost(Exception):
    """The replication connection failed or was closed by the server (retrying may work)."""


class StreamRefused(Exception):
    """The server refused to stream (no such slot, slot of another plugin, no permission...)."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class ReplicationStream:
    """One ``START_REPLICATION`` on ``slot`` from ``start_lsn`` (an open COPY BOTH exchange).

    Attributes:
        decoded: The highest WAL position the walsender said it has decoded and sent (from
            keepalives), or a commit's end seen in the stream, whichever is higher.
        received: Messages read so far.
        drained: Whether libpq's buffer held no whole message when last looked at: if not, a
            select() on the socket would not see what is already buffered.
    """

    def __init__(self, dsn: str, slot: str, publication: str, start_lsn: int, connect_timeout: int) -> None:
        import psycopg
        import psycopg.conninfo
        from psycopg import pq

        self._error = psycopg.Error
        self._conn = _replication_connection(dsn, connect_timeout, "icefloe-ingest-stream")
        command = (f'START_REPLICATION SLOT "{slot}" LOGICAL {start_lsn >> 32:X}/{start_lsn & 0xFFFFFFFF:X} '
                   f"(proto_version '1', publication_names '{publication}')")
        result = self._conn.exec_(command.encode())
        if result.status != pq.ExecStatus.COPY_BOTH:
            sqlstate = _text(result.error_field(pq.DiagnosticField.SQLSTATE) or b"")
            message = _text(result.error_message or self._conn.error_message)
            self._conn.finish()
            if not sqlstate or sqlstate.startswith("08"):
                raise StreamLost(message)
            raise StreamRefused(message, sqlstate)
        self._conn.nonblocking = 1
        self._socket = self._conn.socket
        self.decoded = start_lsn
        self.received = 0
        self.drained = True
        self._written = start_lsn
        self._flushed = start_lsn
        self._last_status = time.monotonic()
        self._told_written = start_lsn
        self._closed = False

    def fileno(self) -> int:
        return self._socket

    def next(self, timeout_s: float) -> bytes | None:
        """The next ``pgoutput`` message, or None when none came within ``timeout_s``.
        Keepalives are taken here (answered when the server asks).

        Raises:
            StreamLost: The connection broke or the server ended the stream.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        looked = False
        while True:
            message = self._take()
            if message is not None:
                return message
            now = time.monotonic()
            if now - self._last_status >= STATUS_EVERY_S:
                self._send_status(False)
            if now >= deadline and looked:
                return None
            self._wait(max(0.0, deadline - now))  # consumes what the socket has
            looked = True

    def ask_position(self) -> None:
        """Ask the walsender for a keepalive now (it carries how far it has decoded)."""
        self._send_status(True)

    def report_received(self) -> None:
        """Tell the walsender what was received (written), when that moved since last told."""
        if self._written > self._told_written:
            self._send_status(False)

    def confirm(self, lsn: int) -> None:
        """Report ``lsn`` as flushed: the slot may drop WAL before it."""
        if lsn > self._flushed:
            self._flushed = lsn
            self._send_status(False)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._conn.finish()
            except Exception:  # noqa: S110 - closing a broken connection
                pass

    # -- the wire --------------------------------------------------------------------------------

    def _take(self) -> bytes | None:
        """One CopyData message if one is buffered (keepalives handled and skipped)."""
        while True:
            try:
                size, data = self._conn.get_copy_data(1)
            except self._error as exc:
                raise StreamLost(_text(str(exc))) from None
            if size == 0:
                self.drained = True
                return None
            if size < 0:
                raise StreamLost(self._ended())
            kind = bytes(data[:1])
            if kind == b"w":
                self.received += 1
                self.drained = False
                return bytes(data[_XLOG_HEADER:])
            if kind == b"k":
                wal_end, _clock, reply = _KEEPALIVE.unpack_from(data, 1)
                self.decoded = max(self.decoded, wal_end)
                self._written = max(self._written, wal_end)
                if reply:
                    self._send_status(False)

    def _wait(self, timeout_s: float) -> None:
        try:
            readable, _, _ = select.select([self._socket], [], [], timeout_s)
        except (OSError, ValueError) as exc:
            raise StreamLost(f"replication connection: {exc}") from None
        if readable:
            try:
                self._conn.consume_input()
            except self._error as exc:
                raise StreamLost(_text(str(exc))) from None

    def _send_status(self, reply: bool) -> None:
        clock = int(time.time() * 1_000_000) - PG_EPOCH_US
        message = _STATUS.pack(b"r", self._written, self._flushed, self._flushed, clock, 1 if reply else 0)
        try:
            sent = self._conn.put_copy_data(message)
            while sent == 1 and self._conn.flush() == 1:  # nonblocking: wait until the socket takes it
                select.select([], [self._socket], [], 1.0)
        except (self._error, OSError, ValueError) as exc:
            raise StreamLost(f"replication connection: {exc}") from None
        if sent != 1:
            raise StreamLost(_text(self._conn.error_message) or "replication connection: the status update failed")
        self._told_written = self._written
        self._last_status = time.monotonic()

    def _ended(self) -> str:
        """Why the COPY ended (the server's error, if it sent one)."""
        error = _text(self._conn.error_message)
        result = self._conn.get_result()
        if result is not None and result.error_message:
            error = _text(result.error_message)
        return error or "the server ended the replication stream"


def _text(raw: Any) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else str(raw or "")
    return text.strip().splitlines()[0] if text.strip() else ""


class ExportedSnapshot:
    """A logical slot created over the replication protocol with ``EXPORT_SNAPSHOT``: the
    snapshot ``name`` sees exactly the transactions committed before the slot's consistent
    point, and the slot streams exactly those after it. The snapshot lives while this
    connection stays open and idle: import it (``SET TRANSACTION SNAPSHOT``) first, then
    ``close``.

    Raises:
        StreamLost: The server could not be reached.
        StreamRefused: The server refused (the slot exists, no permission, ...).
    """

    def __init__(self, dsn: str, slot: str, connect_timeout: int) -> None:
        from psycopg import pq

        self._conn = _replication_connection(dsn, connect_timeout, "icefloe-ingest-slot")
        result = self._conn.exec_(f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput EXPORT_SNAPSHOT'.encode())
        if result.status != pq.ExecStatus.TUPLES_OK:
            sqlstate = _text(result.error_field(pq.DiagnosticField.SQLSTATE) or b"")
            message = _text(result.error_message or self._conn.error_message)
            self._conn.finish()
            if not sqlstate or sqlstate.startswith("08"):
                raise StreamLost(message)
            raise StreamRefused(message, sqlstate)
        self.name = _text(result.get_value(0, 2))
        self.consistent_point = _text(result.get_value(0, 1))

    def close(self) -> None:
        try:
            self._conn.finish()
        except Exception:  # noqa: S110 - closing a broken connection
            pass


def _replication_connection(dsn: str, connect_timeout: int, application_name: str) -> PGconn:
    """A libpq connection in logical replication mode, or ``StreamLost`` with the server's reason."""
    import psycopg.conninfo
    from psycopg import pq

    info = psycopg.conninfo.make_conninfo(dsn, replication="database", connect_timeout=str(connect_timeout),
                                          application_name=application_name)
    conn: PGconn = pq.PGconn.connect(info.encode())
    if conn.status != pq.ConnStatus.OK:
        message = _text(conn.error_message)
        conn.finish()
        raise StreamLost(message)
    return conn
