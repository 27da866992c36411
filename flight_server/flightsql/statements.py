"""Statement and prepared-statement handles: stateless, so any server instance can serve them.

A statement handle (inside ``TicketStatementQuery``) carries the SQL, the DB schema unqualified
names resolve in, the bound parameter values, the snapshot id of every table the query
saw at GetFlightInfo and the principal it was planned for; DoGet reads exactly those snapshots,
for that principal only. A prepared-statement handle carries
the SQL, the default schema and, once bound through DoPut, the parameter values (as an Arrow
IPC stream); binding returns an updated handle (``DoPutPreparedStatementResult``).

Handles travel through clients, so each is sealed by ``HandleCodec`` (``flight_server.security.handles``):
nothing in one is decoded before its signature checks out. Parameter batches a client binds are
bounded in rows and bytes as they are read, before they are kept or embedded in a handle.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from flight_server import errors
from flight_server.engine import PinnedTable
from flight_server.security.handles import HandleSigner

MAX_HANDLE_BYTES = 4 * 1024 * 1024
# Bound parameters: what one DoPut may bind to a prepared statement (JDBC executeBatch and ADBC
# executemany send many rows), counted after decompression, batch by batch as they arrive.
MAX_PARAM_ROWS = 100_000
MAX_PARAM_BYTES = 64 * 1024 * 1024


def _encode_params(batch: pa.RecordBatch | None) -> str | None:
    if batch is None:
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def _decode_params(raw: str | None) -> pa.RecordBatch | None:
    if raw is None:
        return None
    # Only ever bytes this server encoded (the handle's signature was checked first).
    table = pa.ipc.open_stream(base64.b64decode(raw, validate=True)).read_all()
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], table.schema)


# A query bound to several parameter rows runs once per row, one result stream for all of them
# (ADBC executemany / BindStream); this many rows at most.
MAX_QUERY_PARAM_ROWS = 1000


def bound_rows(batch: pa.RecordBatch | None) -> list[list[Any]] | None:
    """Every bound parameter row as values, in order (None when nothing is bound; writes: JDBC
    executeBatch / ADBC executemany bind several)."""
    if batch is None or batch.num_columns == 0:
        return None
    columns = [[_duckdb_value(v, batch.schema.field(i).type) for v in batch.column(i).to_pylist()]
               for i in range(batch.num_columns)]
    return [list(row) for row in zip(*columns, strict=True)]


def _duckdb_value(value: Any, typ: pa.DataType) -> Any:
    """A bound value as DuckDB binds it with its meaning: Arrow maps come out of ``to_pylist``
    as lists of (key, value) pairs, which DuckDB would bind as a list of lists; DuckDB binds
    ``{"key": [...], "value": [...]}`` as a MAP (nested inside lists and structs too)."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return {"key": [_duckdb_value(k, typ.key_type) for k, _ in value],
                "value": [_duckdb_value(v, typ.item_type) for _, v in value]}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return [_duckdb_value(v, typ.value_type) for v in value]
    if pa.types.is_struct(typ):
        return {f.name: _duckdb_value(value.get(f.name), f.type) for f in typ}
    return value


def param_rows(batch: pa.RecordBatch | None) -> list[list[Any]] | None:
    """Every bound parameter row of a query, in order (None when nothing is bound).

    Raises:
        errors.InvalidArgument: More than ``MAX_QUERY_PARAM_ROWS`` rows, or none.
    """
    if batch is None or batch.num_columns == 0:
        return None
    if batch.num_rows == 0:
        raise errors.InvalidArgument("no parameter rows are bound; bind at least one")
    if batch.num_rows > MAX_QUERY_PARAM_ROWS:
        raise errors.InvalidArgument(
            f"{batch.num_rows} parameter rows bound to a query; at most {MAX_QUERY_PARAM_ROWS} run as one result"
        )
    return bound_rows(batch)


def _load(body: bytes, what: str) -> dict[str, Any]:
    try:
        raw = json.loads(body)
        if not isinstance(raw, dict):
            raise ValueError
        return raw
    except (ValueError, RecursionError):
        raise errors.InvalidArgument(f"malformed {what}") from None


@dataclass
class StatementHandle:
    sql: str
    default_schema: tuple[str, ...] | None
    pins: list[PinnedTable] = field(default_factory=list)
    params: pa.RecordBatch | None = None
    # Rows a write statement affected when it ran at GetFlightInfo (not part of the handle).
    written: int | None = None
    # The handle reads back a write's count (the write is in the query log already, this is not).
    readback: bool = False
    # The sealed transaction whose staged snapshots the pins name (its own writes, read back).
    transaction_id: bytes | None = None
    # The user the query was planned for (with authentication on): only that user runs it,
    # on whichever server of the warehouse the ticket is sent to.
    principal: str | None = None

    def body(self) -> bytes:
        body: dict[str, Any] = {
            "q": self.sql,
            "s": list(self.default_schema) if self.default_schema else None,
            "t": [p.to_json() for p in self.pins],
            "v": _encode_params(self.params),
        }
        if self.readback or self.written is not None:
            body["w"] = 1
        if self.transaction_id:
            body["x"] = self.transaction_id.decode("ascii")
        if self.principal is not None:
            body["p"] = self.principal
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_body(cls, data: bytes) -> StatementHandle:
        raw = _load(data, "statement handle")
        try:
            return cls(
                str(raw["q"]),
                tuple(raw["s"]) if raw.get("s") else None,
                [PinnedTable.from_json(p) for p in raw.get("t", [])],
                _decode_params(raw.get("v")),
                readback=raw.get("w") == 1,
                transaction_id=str(raw["x"]).encode("ascii") if raw.get("x") else None,
                principal=str(raw["p"]) if raw.get("p") is not None else None,
            )
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            raise errors.InvalidArgument("malformed statement handle") from None


@dataclass
class PreparedHandle:
    sql: str
    default_schema: tuple[str, ...] | None
    is_query: bool
    params: pa.RecordBatch | None = None
    # The sealed transaction id it was prepared in (runs of it belong to that transaction;
    # the id is verified again, against the caller, at every run).
    transaction_id: bytes | None = None

    def body(self) -> bytes:
        body: dict[str, Any] = {
            "q": self.sql,
            "s": list(self.default_schema) if self.default_schema else None,
            "k": "query" if self.is_query else "update",
            "v": _encode_params(self.params),
        }
        if self.transaction_id:
            body["x"] = self.transaction_id.decode("ascii")
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_body(cls, data: bytes) -> PreparedHandle:
        raw = _load(data, "prepared statement handle")
        try:
            return cls(
                str(raw["q"]),
                tuple(raw["s"]) if raw.get("s") else None,
                raw.get("k") == "query",
                _decode_params(raw.get("v")),
                str(raw["x"]).encode("ascii") if raw.get("x") else None,
            )
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            raise errors.InvalidArgument("malformed prepared statement handle") from None


class HandleCodec:
    """Seals handles for clients and opens (verifies, then decodes) the ones they send back."""

    STATEMENT = "stmt"
    PREPARED = "prep"
    METADATA = "meta"

    def __init__(self, signer: HandleSigner) -> None:
        self._signer = signer

    def _open(self, purpose: str, data: bytes, what: str) -> bytes:
        if len(data) > MAX_HANDLE_BYTES:
            raise errors.InvalidArgument(f"{what} too large")
        return self._signer.open(purpose, data, what)

    def statement(self, handle: StatementHandle) -> bytes:
        return self._signer.seal(self.STATEMENT, handle.body())

    def open_statement(self, data: bytes) -> StatementHandle:
        return StatementHandle.from_body(self._open(self.STATEMENT, data, "statement handle"))

    def prepared(self, handle: PreparedHandle) -> bytes:
        return self._signer.seal(self.PREPARED, handle.body())

    def open_prepared(self, data: bytes) -> PreparedHandle:
        return PreparedHandle.from_body(self._open(self.PREPARED, data, "prepared statement handle"))

    def metadata(self, command: bytes) -> bytes:
        """A metadata command (the packed Any) as the handle of its ticket."""
        return self._signer.seal(self.METADATA, command)

    def open_metadata(self, data: bytes) -> bytes:
        return self._open(self.METADATA, data, "ticket")


def read_parameters(reader: Any) -> pa.RecordBatch | None:
    """All parameter rows a client sent with DoPut, as one batch (None when it sent no columns).

    Read batch by batch, so a stream past ``MAX_PARAM_ROWS`` / ``MAX_PARAM_BYTES`` (decompressed)
    is refused as soon as it crosses the bound, without reading the rest.

    Raises:
        errors.InvalidArgument: Not an Arrow stream, or too many parameter rows or bytes.
    """
    batches: list[pa.RecordBatch] = []
    rows = size = 0
    try:
        schema = reader.schema
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            batch = chunk.data
            if batch is None:
                continue
            rows += batch.num_rows
            size += batch.nbytes
            if rows > MAX_PARAM_ROWS or size > MAX_PARAM_BYTES:
                raise errors.InvalidArgument(
                    f"too many parameter values: at most {MAX_PARAM_ROWS} rows and "
                    f"{MAX_PARAM_BYTES // (1024 * 1024)} MiB may be bound in one call"
                )
            batches.append(batch)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise errors.InvalidArgument(f"could not read parameters: {errors.first_line(exc)}") from None
    if len(schema) == 0:
        return None
    table = pa.Table.from_batches(batches, schema).combine_chunks()
    out = table.to_batches()
    return out[0] if out else pa.RecordBatch.from_pylist([], schema)

