"""The query log: one structured line per SQL statement on the logger ``icefloe.querylog``.

Each line carries the principal, the statement kind, the SQL *normalised* (every string and
number literal replaced by ``?``, comments dropped, whitespace collapsed), the duration, rows,
bytes and the gRPC status. Literals are found by DuckDB's own tokenizer (``duckdb.tokenize``,
the engine's parser, microseconds per statement), so quoting tricks cannot slip a literal
through: a string, dollar-quoted string, blob or number literal is one token whatever it holds,
and an unterminated string is one token to the end. Nothing else a client sends (parameters,
tokens, passwords) is ever logged.

A statement slower than ``--slow-query-ms`` is logged at WARNING with ``slow=true``.
``--log-format json`` turns every line into one JSON object (``logging_config``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from flight_server import errors
from flight_server.engine import messages
from flight_server.observability.metrics import Metrics

# Cuts one batch into the messages sent for it (see flight_server.message_size.sliced).
Split = Callable[[pa.RecordBatch], Iterable[pa.RecordBatch]]

logger = logging.getLogger("icefloe.querylog")

_LITERALS = {duckdb.token_type.string_const, duckdb.token_type.numeric_const}
_COMMENT = duckdb.token_type.comment
# Longest normalised text logged; past it the line says how much was cut.
MAX_SQL_CHARS = 2000


# Only this much of a statement is tokenized (a 1 MB IN list must not cost the log seconds);
# the rest is left out, which is safe: a literal cut in two is still one literal token.
MAX_TOKENIZED_CHARS = 16 * 1024
# Statements up to this long are remembered (prepared statements repeat); longer ones are not
# kept in memory.
MAX_CACHED_CHARS = 4096


def normalise(sql: str) -> tuple[str, str]:
    """(statement kind, SQL with literals redacted) of ``sql``.

    The kind is the first keyword, upper-cased (``SELECT``, ``INSERT``, ``WITH``...).
    """
    if len(sql) <= MAX_CACHED_CHARS:
        return _normalise_cached(sql)
    kind, text = _normalise(sql[:MAX_TOKENIZED_CHARS])
    if len(sql) > MAX_TOKENIZED_CHARS:
        text += f" ... ({len(sql) - MAX_TOKENIZED_CHARS} more chars not logged)"
    return kind, text


@functools.lru_cache(maxsize=1024)
def _normalise_cached(sql: str) -> tuple[str, str]:
    return _normalise(sql)


def _normalise(sql: str) -> tuple[str, str]:
    try:
        tokens = duckdb.tokenize(sql)
    except Exception:  # the tokenizer refused the text: log nothing of it
        return "UNKNOWN", "<not tokenizable>"
    parts: list[str] = []
    kind = "UNKNOWN"
    for i, (start, token) in enumerate(tokens):
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        segment = sql[start:end]  # the token and the whitespace after it
        text = segment.rstrip()
        spaced = len(text) < len(segment)
        glued = i > 0 and tokens[i - 1][1] == duckdb.token_type.numeric_const and parts and parts[-1] == "?"
        if token == _COMMENT:
            text, spaced = "", True
        elif token == duckdb.token_type.numeric_const and parts and parts[-1] == "$":
            pass  # a positional parameter ($1) is no literal
        elif token in _LITERALS or (glued and token == duckdb.token_type.identifier):
            # ``0x1F`` tokenizes as the number 0 and the name x1F: the rest of a literal
            text = "" if glued else "?"
        elif kind == "UNKNOWN" and token == duckdb.token_type.keyword:
            kind = text.upper()
        parts.append(text + " " if spaced else text)
    out = " ".join("".join(parts).split())
    if len(out) > MAX_SQL_CHARS:
        out = out[:MAX_SQL_CHARS] + f"... ({len(out) - MAX_SQL_CHARS} more chars)"
    return kind, out


class QueryLog:
    """Counts statements in the metrics and writes their lines from a background thread.

    The RPC thread only appends a tuple to a deque; the writer
    thread wakes every ``FLUSH_S`` (half a second), normalises and logs what piled up. Formatting and writing
    a line on the RPC thread (and waking a writer per line) cost ~0.2 ms of a ~4 ms SELECT 1
    end to end (bench_ops_overhead), mostly GIL hand-offs.

    Args:
        metrics: Where statement counts go.
        slow_query_ms: Statements at or above this duration are logged at WARNING (None: never).
        background: Start the writer thread; False leaves the writing to ``flush`` calls.
    """

    FLUSH_S = 0.5
    # Batches read before the stream is handed to Flight (see ``streamed``).
    READ_AHEAD = 2
    # Lines waiting beyond this are dropped (and counted): a log that cannot keep up must not
    # grow the server's memory without bound.
    MAX_PENDING = 100_000

    def __init__(self, metrics: Metrics, slow_query_ms: float | None = None, background: bool = True) -> None:
        self.metrics = metrics
        self.background = background
        self.slow_s = slow_query_ms / 1000.0 if slow_query_ms is not None else None
        self._pending: deque[tuple[str, str | None, float, str, int | None, int | None]] = deque()
        self.dropped = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # Statement counts are kept by the writer: a scrape writes what is pending first.
        metrics.before_scrape.append(self.flush)

    def record(self, sql: str, principal: str | None, started: float, status: str, rows: int | None = None,
               nbytes: int | None = None) -> None:
        """Log one statement that began at ``started`` (``time.perf_counter()``) and ended now."""
        if not self.metrics.enabled:
            return  # ICEFLOE_INSTRUMENTATION=off: the benchmark baseline
        seconds = time.perf_counter() - started
        if len(self._pending) >= self.MAX_PENDING:
            self.dropped += 1
            return
        self._pending.append((sql, principal, seconds, status, rows, nbytes))
        if self._thread is None and self.background:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="icefloe-querylog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.FLUSH_S):
            self.flush()

    def flush(self) -> None:
        """Write every pending line (the writer thread, a metrics scrape, and ``close``)."""
        while self._pending:
            try:
                sql, principal, seconds, status, rows, nbytes = self._pending.popleft()
            except IndexError:
                return
            self._write(sql, principal, seconds, status, rows, nbytes)
        if self.dropped:
            logger.warning("the query log fell behind: %d lines dropped", self.dropped)
            self.dropped = 0

    def _write(self, sql: str, principal: str | None, seconds: float, status: str, rows: int | None,
               nbytes: int | None) -> None:
        kind, text = normalise(sql)
        self.metrics.statement(kind, status, seconds)
        slow = self.slow_s is not None and seconds >= self.slow_s
        level = logging.WARNING if slow or status == "INTERNAL" else logging.INFO
        if not logger.isEnabledFor(level):
            return
        fields: dict[str, Any] = {
            "principal": principal, "kind": kind, "status": status, "duration_ms": round(seconds * 1000, 3),
            "rows": rows, "bytes": nbytes, "slow": slow, "sql": text,
        }
        # makeRecord + handle is logger.log without findCaller's stack walk (a tenth of a line's
        # cost); no formatter here prints the caller's file or line.
        logger.handle(logger.makeRecord(logger.name, level, __file__, 0, "%s", (_Line(fields),), None,
                                        extra={"fields": fields}))

    def close(self) -> None:
        """Stop the writer thread and write what is left (at server shutdown)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(5.0)
        self.flush()

    def streamed(self, reader: pa.RecordBatchReader, sql: str, principal: str | None,
                 started: float, split: Split | None = None) -> pa.RecordBatchReader | pa.Table:
        """``reader`` counted batch by batch; the statement is logged when it ends (read to the
        end, failed, or dropped by gRPC when the client went away).

        The first ``READ_AHEAD`` batches are read here, on the RPC's own Python call. A result
        that ends within them (``SELECT 1``, lookups, counts) is logged at once and returned
        as a table, which Flight sends without calling back into Python: counting it through a
        Python generator made gRPC's thread take the GIL twice more per DoGet, 3% of a
        ``SELECT 1`` end to end (bench_ops_overhead). Longer results go on through the counting
        generator, whose cost per batch is nothing beside a batch's size.

        ``split`` cuts each batch into the messages the client is sent (the message-size
        bound), inside that same generator: a second generator around this one cost every batch
        two more crossings between gRPC's C++ and Python. Counts are of the batches as read.
        """
        pieces: Split = split if split is not None else _whole
        if not self.metrics.enabled:
            if split is None:
                return reader
            return pa.RecordBatchReader.from_batches(reader.schema, (p for b in reader for p in pieces(b)))
        head: list[pa.RecordBatch] = []
        failure: Exception | None = None
        try:
            while len(head) < self.READ_AHEAD:
                head.append(reader.read_next_batch())
        except StopIteration:
            rows, nbytes = sum(b.num_rows for b in head), sum(b.nbytes for b in head)
            self.metrics.streamed(rows, nbytes)
            self.record(sql, principal, started, "OK", rows, nbytes)
            return pa.Table.from_batches([p for b in head for p in pieces(b)], reader.schema)
        except Exception as exc:  # raised to the client from the stream, as it would have been
            # Kept without its traceback: that holds this frame, whose cells hold the failure
            # and the reader, a cycle that kept the reader (and its query) until the collector ran.
            failure = exc.with_traceback(None)
        tally = _Tally()

        def batches() -> Iterator[pa.RecordBatch]:
            nonlocal failure
            status = "CANCELLED"  # dropped before its end: the client went away
            try:
                for batch in head:
                    tally.rows += batch.num_rows
                    tally.nbytes += batch.nbytes
                    yield from pieces(batch)
                head.clear()
                if failure is not None:
                    pending, failure = failure, None  # no cell may keep it (see above)
                    raise pending
                for batch in reader:
                    tally.rows += batch.num_rows
                    tally.nbytes += batch.nbytes
                    yield from pieces(batch)
                status = "OK"
            except (pa.ArrowException, OSError) as exc:
                # DuckDB failed mid-stream (it reaches Python through Arrow's C stream): the
                # client gets what it got without this wrapper, the same error type (UNKNOWN)
                # and message, and no Python traceback (see errors.install_clean_tracebacks).
                status = "UNKNOWN"
                # Arrow keeps the original error alive past the call; without its traceback
                # it cannot keep this frame (and the reader in its cells) with it.
                exc.__traceback__ = None
                raise errors.clean_copy(exc, messages.clean(exc)) from None
            except Exception as exc:
                status = errors.status_of(exc)
                errors.raise_for_flight(exc)
            finally:
                self.metrics.streamed(tally.rows, tally.nbytes)
                self.record(sql, principal, started, status, tally.rows, tally.nbytes)

        return pa.RecordBatchReader.from_batches(reader.schema, batches())


def _whole(batch: pa.RecordBatch) -> Iterable[pa.RecordBatch]:
    return (batch,)


@dataclass
class _Tally:
    rows: int = 0
    nbytes: int = 0


class _Line:
    """The text form of a line, rendered only if a handler formats it."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __str__(self) -> str:
        f = self.fields
        out = [f"{key}={f[key]}" for key in ("kind", "status", "duration_ms", "rows", "bytes", "principal")
               if f[key] is not None]
        if f["slow"]:
            out.append("slow=true")
        out.append(f"sql={f['sql']}")
        return " ".join(out)
