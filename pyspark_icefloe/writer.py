"""Writes: ``df.write`` and ``df.writeStream`` with ``format("icefloe")``, on two-phase appends.

Every Spark task stages its rows with one DoPut carrying ``x-icefloe-stage: <job id>`` (files
written and fsync'd, nothing committed) and hands its signed staging token to the driver; the
driver's ``commit()`` makes one ``icefloe.commit-staged`` call with every successful task's
token, so a job is one snapshot, one feed event and one lineage run, and ``abort()`` deletes what
was staged. A task that fails and is retried stages again under a new token; only the tokens of
the attempts Spark reports as committed are ever committed, so a retried task never duplicates.

The commit's idempotency key is the job id (a UUID made on the driver when Spark creates the
writer) for batch writes and ``(stream key, batch id)`` for streaming writes, so a micro-batch
replayed after a crash is answered as a duplicate, not appended again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from pyspark_icefloe.connection import IcefloeSparkError, Settings, option, quote_table

logger = logging.getLogger("icefloe.spark")

STAGE_HEADER = b"x-icefloe-stage"
COMMIT_STAGED = "icefloe.commit-staged"
ABORT_STAGED = "icefloe.abort-staged"


@dataclass
class Staged(WriterCommitMessage):
    """What one task staged: its tokens (none for an empty partition) and row count."""

    tokens: list[str] = field(default_factory=list)
    rows: int = 0


def stage(settings: Settings, table: str, job_id: str, batches: Iterator[pa.RecordBatch]) -> Staged:
    """DoPut one task's batches as a staged (uncommitted) append; answer its token.

    Raises:
        pyarrow.ArrowException: The server refused the rows (schema mismatch, permissions).
    """
    first = next(batches, None)
    while first is not None and first.num_rows == 0:
        first = next(batches, None)
    if first is None:
        return Staged()
    namespace, _, name = table.rpartition(".")
    client = settings.connect()
    try:
        descriptor = flight.FlightDescriptor.for_path(namespace, name)
        writer, reader = client.flight.do_put(descriptor, first.schema,
                                              client.options([(STAGE_HEADER, job_id.encode())]))
        rows = 0
        for batch in _chain(first, batches):
            if batch.num_rows:
                writer.write_batch(batch)
                rows += batch.num_rows
        writer.done_writing()
        answer = reader.read()
        writer.close()
    finally:
        client.close()
    if answer is None:
        raise IcefloeSparkError(f"the server answered no staging token for {table}")
    body = json.loads(answer.to_pybytes())
    token = body.get("token")
    if not isinstance(token, str):
        raise IcefloeSparkError(f"the server did not stage the rows for {table} (no token in its answer)")
    return Staged([token], int(body.get("rows", rows)))


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _tokens(messages: list[WriterCommitMessage | None]) -> list[str]:
    return [t for m in messages if isinstance(m, Staged) for t in m.tokens]


def commit_tokens(settings: Settings, table: str, tokens: list[str], key: str, overwrite: bool) -> dict[str, Any]:
    """One ``icefloe.commit-staged`` call (retried safely: the key makes it exactly once).

    ``overwrite`` uses the action's ``"mode": "overwrite"``: the same one snapshot removes the
    table's rows and adds the tokens' files, so a reader sees the old rows or the new ones,
    never an empty table; with no tokens (an empty DataFrame) it empties the table.
    """
    body = {"table": table, "tokens": tokens, "idempotency_key": key, "mode": "overwrite" if overwrite else "append"}
    return _action(settings, COMMIT_STAGED, body)


def abort_tokens(settings: Settings, table: str, tokens: list[str]) -> None:
    if tokens:
        _action(settings, ABORT_STAGED, {"table": table, "tokens": tokens})


def _action(settings: Settings, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    client = settings.connect()
    try:
        answers = client.action(kind, body)
    finally:
        client.close()
    return answers[0] if answers else {}


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("icefloe").mode("append" | "overwrite")``: one snapshot per job."""

    def __init__(self, settings: Settings, table: str, schema: StructType, overwrite: bool,
                 options: Mapping[str, str]) -> None:
        quote_table(table)
        self.settings = settings
        self.table = table
        self.overwrite = overwrite
        self.job_id = f"spark-{uuid.uuid4()}"  # made once, on the driver; tasks get it pickled

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage(self.settings, self.table, self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tokens = _tokens(messages)
        if not tokens and not self.overwrite:
            return  # nothing to append: no empty snapshot
        result = commit_tokens(self.settings, self.table, tokens, self.job_id, self.overwrite)
        logger.info("icefloe write of %s committed: %s", self.table, result)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_tokens(self.settings, self.table, _tokens(messages))


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("icefloe")``: one snapshot per micro-batch, keyed by batch id."""

    def __init__(self, settings: Settings, table: str, schema: StructType, overwrite: bool,
                 options: Mapping[str, str]) -> None:
        quote_table(table)
        self.settings = settings
        self.table = table
        stream_key = option(options, "streamKey") or option(options, "checkpointLocation")
        if not stream_key:
            raise IcefloeSparkError("a streaming write needs option checkpointLocation (or streamKey): it keys "
                                    "each micro-batch's commit so a replayed batch is not appended twice")
        self.stream_key = stream_key
        self.job_id = f"spark-stream-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage(self.settings, self.table, self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        tokens = _tokens(messages)
        if not tokens:
            return
        key = f"spark-stream:{self.stream_key}:{batchId}"
        result = commit_tokens(self.settings, self.table, tokens, key, False)
        logger.info("icefloe stream write of %s, batch %d: %s", self.table, batchId, result)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        abort_tokens(self.settings, self.table, _tokens(messages))

