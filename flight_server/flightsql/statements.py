"""Statement and prepared-statement handles: stateless, so any server instance can serve them.

A statement handle (inside ``TicketStatementQuery``) carries the SQL, the DB schema unqualified
names resolve in, the bound parameter values and the snapshot id of every table the query
saw at GetFlightInfo; DoGet reads exactly those snapshots. A prepared-statement handle carries
the SQL, the default schema and, once bound through DoPut, the parameter values (as an Arrow
IPC stream); binding returns an updated handle (``DoPutPreparedStatementResult``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from flight_server import errors
from flight_server.engine import PinnedTable

_STATEMENT_MAGIC = b"icefloe.stmt.v1:"
_PREPARED_MAGIC = b"icefloe.prep.v1:"
MAX_HANDLE_BYTES = 4 * 1024 * 1024


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
    table = pa.ipc.open_stream(base64.b64decode(raw)).read_all()
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], table.schema)


def param_values(batch: pa.RecordBatch | None) -> list[Any] | None:
    """The values of the one bound parameter row, in order (None when nothing is bound)."""
    if batch is None or batch.num_columns == 0:
        return None
    if batch.num_rows != 1:
        raise errors.InvalidArgument(f"expected one row of parameter values, got {batch.num_rows}")
    return [batch.column(i)[0].as_py() for i in range(batch.num_columns)]


def _load(data: bytes, magic: bytes, what: str) -> dict[str, Any]:
    if len(data) > MAX_HANDLE_BYTES:
        raise errors.InvalidArgument(f"{what} too large")
    if not data.startswith(magic):
        raise errors.InvalidArgument(f"not an icefloe {what}")
    try:
        raw = json.loads(data[len(magic) :])
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

    def encode(self) -> bytes:
        body = {
            "q": self.sql,
            "s": list(self.default_schema) if self.default_schema else None,
            "t": [p.to_json() for p in self.pins],
            "v": _encode_params(self.params),
        }
        return _STATEMENT_MAGIC + json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> StatementHandle:
        raw = _load(data, _STATEMENT_MAGIC, "statement handle")
        try:
            return cls(
                str(raw["q"]),
                tuple(raw["s"]) if raw.get("s") else None,
                [PinnedTable.from_json(p) for p in raw.get("t", [])],
                _decode_params(raw.get("v")),
            )
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            raise errors.InvalidArgument("malformed statement handle") from None


@dataclass
class PreparedHandle:
    sql: str
    default_schema: tuple[str, ...] | None
    is_query: bool
    params: pa.RecordBatch | None = None

    def encode(self) -> bytes:
        body = {
            "q": self.sql,
            "s": list(self.default_schema) if self.default_schema else None,
            "k": "query" if self.is_query else "update",
            "v": _encode_params(self.params),
        }
        return _PREPARED_MAGIC + json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> PreparedHandle:
        raw = _load(data, _PREPARED_MAGIC, "prepared statement handle")
        try:
            return cls(
                str(raw["q"]),
                tuple(raw["s"]) if raw.get("s") else None,
                raw.get("k") == "query",
                _decode_params(raw.get("v")),
            )
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            raise errors.InvalidArgument("malformed prepared statement handle") from None


def read_parameters(reader: Any) -> pa.RecordBatch | None:
    """All parameter rows a client sent with DoPut, as one batch (None when it sent no columns)."""
    try:
        table = reader.read_all()
    except pa.ArrowException as exc:
        raise errors.InvalidArgument(f"could not read parameters: {exc}") from None
    if table.num_columns == 0:
        return None
    table = table.combine_chunks()
    batches = table.to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], table.schema)
