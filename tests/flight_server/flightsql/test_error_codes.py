"""What each icefloe error becomes on the wire: gRPC code and message, checked with raw gRPC.

A real pyarrow.flight server whose handler goes through ``errors.guard`` (as every icefloe RPC
entry does) raises each error; grpcio reads the status the client actually receives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pyarrow.flight as flight
import pytest
from flightsql_wire import field_bytes

from flight_server import errors

EXPECTED = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.Cancelled: grpc.StatusCode.CANCELLED,
    errors.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    # pyarrow cannot send these codes: the nearest one, with the intended code in the message.
    errors.AlreadyExists: grpc.StatusCode.INVALID_ARGUMENT,
    errors.FailedPrecondition: grpc.StatusCode.INVALID_ARGUMENT,
    errors.Aborted: grpc.StatusCode.INVALID_ARGUMENT,
    errors.OutOfRange: grpc.StatusCode.INVALID_ARGUMENT,
    errors.ResourceExhausted: grpc.StatusCode.UNAVAILABLE,
}
BY_NAME = {cls.__name__: cls for cls in EXPECTED}


class Raiser(flight.FlightServerBase):  # type: ignore[misc]
    @errors.guard
    def do_action(self, context: Any, action: flight.Action) -> Any:
        if action.type == "Crash":
            raise RuntimeError("/secret/path/file.py exploded")
        raise BY_NAME[action.type]("the message for users")


@pytest.fixture(scope="module")
def call() -> Iterator[Any]:
    errors.install_clean_tracebacks()
    server = Raiser("grpc://127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield channel.unary_stream("/arrow.flight.protocol.FlightService/DoAction")
    finally:
        channel.close()
        server.shutdown()


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_error_reaches_client_with_code_and_clean_message(call: Any, cls: type[errors.IcefloeError]) -> None:
    with pytest.raises(grpc.RpcError) as info:
        list(call(field_bytes(1, cls.__name__.encode()), timeout=10))
    assert info.value.code() == EXPECTED[cls]
    details = info.value.details()
    assert "the message for users" in details
    assert "Traceback" not in details and ".py" not in details
    if EXPECTED[cls].name != cls.code:
        assert details.startswith(cls.code + ": ")


def test_unexpected_exception_is_internal_without_details(call: Any) -> None:
    with pytest.raises(grpc.RpcError) as info:
        list(call(field_bytes(1, b"Crash"), timeout=10))
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in info.value.details() and "Traceback" not in info.value.details()
