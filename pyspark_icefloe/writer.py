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

Before any task starts, the driver checks the target (``prepare_table``): a missing table is
an error there, in the server's words ("did you mean"), unless option ``create`` is true, which
creates it from the DataFrame's columns (as ``saveAsTable`` would); columns the table lacks are
named there too. Columns are matched by name as the server matches them (case-insensitively
where that is unambiguous). Option ``schema-policy`` (``match`` or ``strict``) is sent with each
staged append. Staged files cannot change the table's schema, so with ``evolve`` the driver
first evolves the table itself, before any task: one empty DoPut of the DataFrame's schema under
``x-icefloe-schema-policy: evolve`` (new columns added as nullable, narrower columns widened,
exactly as an evolving DoPut would; one ``schema`` commit, none when nothing changes); the tasks
then stage under ``match``.
"""

from __future__ import annotations

import difflib
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

from flight_server.flightsql import protocol as p
from pyspark_icefloe.connection import (
    IcefloeSparkError,
    Settings,
    TableNotFound,
    bool_option,
    option,
    quote_table,
    table_schema,
)
from pyspark_icefloe.types import for_iceberg, iceberg_schema, target_schema, to_table_types

logger = logging.getLogger("icefloe.spark")

STAGE_HEADER = b"x-icefloe-stage"
SCHEMA_POLICY_HEADER = b"x-icefloe-schema-policy"
MATCH, STRICT, EVOLVE = "match", "strict", "evolve"  # catalog.schema_policy's names
STAGED_POLICIES = (MATCH, STRICT)
COMMIT_STAGED = "icefloe.commit-staged"
ABORT_STAGED = "icefloe.abort-staged"


@dataclass
class Staged(WriterCommitMessage):
    """What one task staged: its tokens (none for an empty partition) and row count."""

    tokens: list[str] = field(default_factory=list)
    rows: int = 0


def write_policy(options: Mapping[str, str]) -> str | None:
    """Option ``schema-policy`` for a write (None: the table's own), as asked."""
    value = option(options, "schema-policy") or option(options, "schemaPolicy")
    if value is None:
        return None
    policy = value.strip().lower()
    if policy != EVOLVE and policy not in STAGED_POLICIES:
        choices = ", ".join([*STAGED_POLICIES, EVOLVE])
        raise IcefloeSparkError(f"option schema-policy must be one of {choices}, not {value!r}")
    return policy


def staged_policy(options: Mapping[str, str]) -> str | None:
    """The policy each task's staged append is sent with: ``match`` after the driver evolved
    the table (``prepare_table``), else the one asked."""
    policy = write_policy(options)
    return MATCH if policy == EVOLVE else policy


def _matches(table_names: list[str], names: list[str]) -> dict[str, str]:
    """Input name -> table name, as the server matches them: exactly, else the one table column
    that differs only in case (when just one input and one table column fold together)."""
    found = {n: n for n in names if n in table_names}
    free = [t for t in table_names if t not in found.values()]
    for name in names:
        if name in found:
            continue
        folded = [t for t in free if t.casefold() == name.casefold()]
        rivals = [n for n in names if n not in found and n.casefold() == name.casefold()]
        if len(folded) == 1 and len(rivals) == 1:
            found[name] = folded[0]
    return found


def prepare_table(settings: Settings, table: str, schema: StructType,
                  options: Mapping[str, str]) -> pa.Schema | None:
    """On the driver, before any task: the table must exist (or be created, option ``create``)
    and hold every column of the DataFrame. Answers the table's Arrow schema (None for a table
    just made from the DataFrame), which the tasks convert uuid and fixed values to.

    Raises:
        IcefloeSparkError: A missing table (with the server's "did you mean" and how to create
            it), columns the table lacks (each named), a bad option.
    """
    quote_table(table)
    policy = write_policy(options)
    client = settings.connect()
    try:
        try:
            existing = table_schema(client, table)
        except TableNotFound as exc:
            if not bool_option(options, "create", False):
                raise IcefloeSparkError(
                    f"{exc}; create it first (CREATE TABLE {table} (...)), or write with "
                    f'.option("create", "true") to create it from the DataFrame\'s columns'
                ) from None
            _create(client, table, iceberg_schema(target_schema(schema)))
            logger.info("icefloe: created %s from the DataFrame's columns", table)
            return None
        if policy == EVOLVE:
            _evolve(client, table, iceberg_schema(target_schema(schema)))
            return _stored_types(client, table)
        stored = _stored_types(client, table)
    finally:
        client.close()
    names = [f.name for f in schema.fields]
    matched = _matches(existing.names, names)
    unknown = [n for n in names if n not in matched]
    if unknown:
        absent = [t for t in existing.names if t not in matched.values()]

        def hint(name: str) -> str:
            close = difflib.get_close_matches(name, absent, n=1, cutoff=0.6)
            return f" (did you mean {close[0]!r}?)" if close else ""

        listed = ", ".join(f"{n!r}{hint(n)}" for n in unknown)
        raise IcefloeSparkError(
            f"cannot write to {table}: the DataFrame's column{'s' if len(unknown) > 1 else ''} {listed} "
            f"{'are' if len(unknown) > 1 else 'is'} not in the table (its columns: {', '.join(existing.names)}); "
            "rename them (df.withColumnRenamed), or add them to the table first (ALTER TABLE ... ADD COLUMN)"
        )
    return stored


def _stored_types(client: Any, table: str) -> pa.Schema | None:
    """The table's schema as the catalog stores it (GetTables with its schema): Iceberg's uuid
    and fixed types, which a ``SELECT *`` schema shows as text and binary. None if not listed."""
    namespace, _, name = table.rpartition(".")
    command = p.CommandGetTables(db_schema_filter_pattern=namespace, table_name_filter_pattern=name,
                                 include_schema=True).pack()
    try:
        info = client.flight.get_flight_info(flight.FlightDescriptor.for_command(command), client.options())
        listed = pa.concat_tables([client.flight.do_get(e.ticket, client.options()).read_all()
                                   for e in info.endpoints])
    except (flight.FlightError, pa.ArrowException):
        return None  # the types then go as Spark has them; the server names any mismatch
    for row in listed.to_pylist():  # the patterns are LIKE patterns: "_" matched any character
        if row["db_schema_name"] == namespace and row["table_name"] == name:
            return pa.ipc.read_schema(pa.py_buffer(row["table_schema"]))
    return None


def _evolve(client: Any, table: str, schema: pa.Schema) -> None:
    """Evolve ``table`` to hold ``schema``'s columns: an empty DoPut under the evolve policy
    (the server commits the schema change alone, or nothing when none is needed)."""
    namespace, _, name = table.rpartition(".")
    headers = [(SCHEMA_POLICY_HEADER, EVOLVE.encode())]
    try:
        writer, reader = client.flight.do_put(flight.FlightDescriptor.for_path(namespace, name), schema,
                                              client.options(headers))
        writer.done_writing()
        reader.read()
        writer.close()
    except pa.ArrowException as exc:
        from pyspark_icefloe.connection import clean

        raise IcefloeSparkError(f"cannot evolve {table} to the DataFrame's columns: {clean(exc)}") from None
    logger.info("icefloe: evolved %s to the DataFrame's columns", table)


def _create(client: Any, table: str, schema: pa.Schema) -> None:
    """Create ``table`` (and a missing namespace) from ``schema``: an empty Flight SQL bulk
    ingest in mode create, which commits through the server's ordinary path."""
    namespace, _, name = table.rpartition(".")
    command = p.CommandStatementIngest(
        table_definition_options=p.TableDefinitionOptions(if_not_exist=1, if_exists=1),  # create, else fail
        table=name, schema=namespace,
    ).pack()
    try:
        writer, reader = client.flight.do_put(flight.FlightDescriptor.for_command(command), schema, client.options())
        writer.done_writing()
        reader.read()
        writer.close()
    except pa.ArrowException as exc:
        from pyspark_icefloe.connection import clean

        raise IcefloeSparkError(f"cannot create {table}: {clean(exc)}") from None


def stage(settings: Settings, table: str, job_id: str, batches: Iterator[pa.RecordBatch],
          policy: str | None = None, table_types: pa.Schema | None = None) -> Staged:
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
        headers = [(STAGE_HEADER, job_id.encode())]
        if policy is not None:
            headers.append((SCHEMA_POLICY_HEADER, policy.encode()))
        first = to_table_types(for_iceberg(first), table_types)
        writer, reader = client.flight.do_put(descriptor, first.schema, client.options(headers))
        rows = 0
        for batch in _chain(first, batches):
            if batch.num_rows:
                writer.write_batch(to_table_types(for_iceberg(batch), table_types))
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
        # On the driver, before any task; the tasks get the table's types pickled.
        self.table_types = prepare_table(settings, table, schema, options)
        self.settings = settings
        self.table = table
        self.overwrite = overwrite
        self.policy = staged_policy(options)
        self.job_id = f"spark-{uuid.uuid4()}"  # made once, on the driver; tasks get it pickled

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage(self.settings, self.table, self.job_id, iterator, self.policy, self.table_types)

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
        # On the driver, before any task; the tasks get the table's types pickled.
        self.table_types = prepare_table(settings, table, schema, options)
        self.settings = settings
        self.table = table
        self.policy = staged_policy(options)
        stream_key = option(options, "streamKey") or option(options, "checkpointLocation")
        if not stream_key:
            raise IcefloeSparkError("a streaming write needs option checkpointLocation (or streamKey): it keys "
                                    "each micro-batch's commit so a replayed batch is not appended twice")
        self.stream_key = stream_key
        self.job_id = f"spark-stream-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage(self.settings, self.table, self.job_id, iterator, self.policy, self.table_types)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        tokens = _tokens(messages)
        if not tokens:
            return
        key = f"spark-stream:{self.stream_key}:{batchId}"
        result = commit_tokens(self.settings, self.table, tokens, key, False)
        logger.info("icefloe stream write of %s, batch %d: %s", self.table, batchId, result)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        abort_tokens(self.settings, self.table, _tokens(messages))

