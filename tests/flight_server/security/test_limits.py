"""Per-user cap on concurrent calls, and gRPC's metadata limit.

The cap needs calls that stay open. Until the feed (a long-lived DoExchange) exists, this test
runs the real IcefloeServer in-process with its DoExchange replaced by one that waits for a
release: the middleware under test is the real one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from conftest import PASSWORDS
from security_helpers import basic, options, outcome

from flight_server.config import Config
from flight_server.server import IcefloeServer


class HoldingServer(IcefloeServer):
    """IcefloeServer whose DoExchange holds the call open until ``release`` is set."""

    def __init__(self, config: Config) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        super().__init__(config)

    def do_exchange(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        self.authorize(context, "read")
        self.entered.release()
        self.release.wait(30)


@pytest.fixture
def holding_server(warehouse: Path, users_file: Path) -> Iterator[HoldingServer]:
    config = Config(warehouse=str(warehouse), port=0, users_file=str(users_file), max_calls_per_user=2)
    server = HoldingServer(config)
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown_and_close()


def _open_exchange(location: str, header: tuple[bytes, bytes]) -> tuple[flight.FlightClient, Any, Any]:
    client = flight.FlightClient(location)
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(b"{}"), options(header))
    return client, writer, reader


def test_concurrent_calls_per_user_are_capped(holding_server: HoldingServer) -> None:
    location = f"grpc://127.0.0.1:{holding_server.port}"
    client = flight.FlightClient(location)
    rita = client.authenticate_basic_token("rita", PASSWORDS["rita"])
    wendy = client.authenticate_basic_token("wendy", PASSWORDS["wendy"])
    held = [_open_exchange(location, rita) for _ in range(2)]
    try:
        for _ in held:
            assert holding_server.entered.acquire(timeout=10)
        # rita's third call is refused; wendy is not affected
        result, exc = outcome(lambda: client.list_actions(options(rita)))
        assert isinstance(exc, flight.FlightUnavailableError), exc
        assert "too many concurrent calls" in str(exc) and "retry later" in str(exc)
        assert outcome(lambda: client.list_actions(options(wendy))) == ("past_auth", None)
    finally:
        holding_server.release.set()
        for c, writer, reader in held:
            try:
                writer.done_writing()
                reader.read_chunk()
            except Exception:
                pass
            writer.close()
            c.close()
    # once the held calls end, rita is served again (completion is asynchronous: allow a moment)
    for _ in range(100):
        result, exc = outcome(lambda: client.list_actions(options(rita)))
        if exc is None:
            break
        threading.Event().wait(0.05)
    assert (result, exc) == ("past_auth", None)
    client.close()


def test_oversized_metadata_is_refused_by_grpc_and_server_survives(holding_server: HoldingServer) -> None:
    """gRPC's hard metadata limit (16 KiB) applies; pyarrow's server API cannot change it."""
    client = flight.FlightClient(f"grpc://127.0.0.1:{holding_server.port}")
    try:
        big = (b"x-padding", b"x" * 20000)
        with pytest.raises(pa.ArrowException) as info:  # gRPC answers RESOURCE_EXHAUSTED
            client.list_actions(options(basic("rita", PASSWORDS["rita"]), big))
        assert "metadata" in str(info.value)
        # a JDBC-sized header set (a few KiB) passes
        header = basic("rita", PASSWORDS["rita"])
        jdbc_like = [(f"x-prop-{i}".encode(), b"v" * 100) for i in range(30)]
        assert isinstance(client.list_actions(options(header, *jdbc_like)), list)
    finally:
        client.close()
