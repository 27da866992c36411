"""A plain pyarrow.flight DoPut append, as any client would send it, for integration tests."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

IDEMPOTENCY_HEADER = b"x-icefloe-idempotency-key"
STAGE_HEADER = b"x-icefloe-stage"
SCHEMA_POLICY_HEADER = b"x-icefloe-schema-policy"


def do_put(
    location: str,
    path: tuple[str, ...],
    data: pa.Table,
    key: str | None = None,
    batch_rows: int | None = None,
    stage: str | None = None,
    schema_policy: str | None = None,
) -> dict[str, Any]:
    """Append ``data`` to the table at ``path`` (or stage it for job ``stage``; under this
    append's ``schema_policy``, e.g. ``"evolve"``); return the server's PutResult JSON."""
    client = flight.FlightClient(location)
    try:
        headers = [(IDEMPOTENCY_HEADER, key.encode())] if key is not None else []
        if stage is not None:
            headers.append((STAGE_HEADER, stage.encode()))
        if schema_policy is not None:
            headers.append((SCHEMA_POLICY_HEADER, schema_policy.encode()))
        writer, reader = client.do_put(
            flight.FlightDescriptor.for_path(*path), data.schema, options=flight.FlightCallOptions(headers=headers)
        )
        writer.write_table(data, max_chunksize=batch_rows)
        writer.done_writing()
        buf = reader.read()
        writer.close()
        assert buf is not None
        result: dict[str, Any] = json.loads(buf.to_pybytes())
        return result
    finally:
        client.close()
