"""Reading a client's append stream: batches checked before any writer reads them, the stream
ended when the server stops or the client goes away, and the client's mistakes mapped to its
status. Shared by plain appends, Flight SQL ingest and staged appends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from pyiceberg.exceptions import NoSuchTableError

from catalog.schema_policy import POLICY_HEADER, SchemaMismatchError, check_policy
from flight_server import errors
from flight_server.security.headers import single_header


def _validated(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A client's batch, checked in full before any writer reads it: Arrow decodes IPC bodies
    without looking at offsets or lengths, and the Parquet writer trusts them (a crafted batch
    would read out of bounds)."""
    try:
        batch.validate(full=True)
    except (pa.ArrowException, ValueError) as exc:
        raise errors.InvalidArgument(
            f"the DoPut stream holds an invalid record batch ({errors.first_line(exc)}); nothing was committed"
        ) from None
    return batch


@contextlib.contextmanager
def client_errors(identifier: tuple[str, ...], checked: str, suffix: str = "") -> Iterator[None]:
    """Map what an append refuses to the client's status: a missing table, input that does not
    fit, and the ValueErrors of the ``checked`` client value (an idempotency key, a job id)."""
    qualified = ".".join(identifier)
    try:
        yield
    except NoSuchTableError:
        raise errors.NotFound(f"table {qualified} does not exist") from None
    except SchemaMismatchError as exc:
        raise errors.InvalidArgument(f"schema mismatch for {qualified}: {exc}{suffix}") from None
    except ValueError as exc:
        if checked in str(exc):
            raise errors.InvalidArgument(str(exc)) from None
        raise


def requested_policy(context: flight.ServerCallContext | None) -> str | None:
    """The append's own schema policy (header ``x-icefloe-schema-policy``), None if not given.

    Raises:
        errors.InvalidArgument: Not a known policy.
    """
    if context is None or not hasattr(context, "get_middleware"):
        return None
    value = single_header(context, POLICY_HEADER)
    if value is None:
        return None
    try:
        return check_policy(value)
    except ValueError as exc:
        raise errors.InvalidArgument(f"header {POLICY_HEADER}: {exc}; nothing was committed") from None


def read_batches(
    reader: Any, context: flight.ServerCallContext | None, stopping: threading.Event, received: list[int] | None = None
) -> Iterator[pa.RecordBatch]:
    """Batches of a Flight or plain Arrow reader (their bytes added to ``received[0]``); ends
    the append if the server stops.

    A client that dies mid-stream looks like an ordinary end of stream to the reader;
    only the call's cancelled flag tells them apart, so it is checked at the end.
    """
    received = received if received is not None else [0]
    if hasattr(reader, "read_chunk"):
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                if context is not None and context.is_cancelled():
                    raise errors.Cancelled("the client went away mid-stream; nothing was committed") from None
                return
            except (pa.ArrowException, OSError) as exc:
                if context is not None and context.is_cancelled():
                    raise errors.Cancelled("the client went away mid-stream; nothing was committed") from None
                # Bytes that are not a valid Arrow IPC batch: the client's fault, not ours.
                raise errors.InvalidArgument(
                    f"the DoPut stream is not valid Arrow data ({errors.first_line(exc)}); nothing was committed"
                ) from None
            if stopping.is_set():
                raise errors.Unavailable("the server is shutting down; nothing was committed")
            if chunk.data is not None:
                received[0] += chunk.data.nbytes
                yield _validated(chunk.data)
    else:
        for batch in reader:
            if stopping.is_set():
                raise errors.Unavailable("the server is shutting down; nothing was committed")
            received[0] += batch.nbytes
            yield batch
