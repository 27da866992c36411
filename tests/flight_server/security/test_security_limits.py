"""Per-user cap on concurrent calls (feed subscriptions hold calls open), and gRPC's metadata limit."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from security_helpers import basic, options, outcome
from security_support import PASSWORDS
from servers import ServerProcess


@pytest.fixture
def capped_server(warehouse: Path, users_file: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(warehouse, ["--users", str(users_file), "--max-calls-per-user", "2"]).start()
    try:
        yield proc
    finally:
        proc.stop()


def _subscribe(location: str, header: tuple[bytes, bytes]) -> tuple[flight.FlightClient, Any, Any]:
    """An open commits.v1 subscription (a call that stays in flight), after its hello."""
    client = flight.FlightClient(location)
    command = json.dumps({"feed": "commits.v1", "after": "latest", "heartbeat_ms": 200}).encode()
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(command), options(header))
    chunk = reader.read_chunk()
    assert "hello" in json.loads(chunk.app_metadata.to_pybytes())
    return client, writer, reader


def _close(held: list[tuple[flight.FlightClient, Any, Any]]) -> None:
    for client, writer, reader in held:
        reader.cancel()
        try:
            writer.close()
        except flight.FlightError:
            pass
        client.close()


def test_concurrent_calls_per_user_are_capped(capped_server: ServerProcess) -> None:
    client = flight.FlightClient(capped_server.location)
    rita = client.authenticate_basic_token("rita", PASSWORDS["rita"])
    wendy = client.authenticate_basic_token("wendy", PASSWORDS["wendy"])
    held = [_subscribe(capped_server.location, rita) for _ in range(2)]
    try:
        # rita's third call is refused; wendy is not affected
        result, exc = outcome(lambda: client.list_actions(options(rita)))
        assert isinstance(exc, flight.FlightUnavailableError), exc
        assert "too many concurrent calls" in str(exc) and "retry later" in str(exc)
        assert outcome(lambda: client.list_actions(options(wendy))) == ("past_auth", None)
    finally:
        _close(held)
    # once the subscriptions end, rita is served again (the server notices the cancel shortly)
    deadline = time.monotonic() + 15
    while True:
        result, exc = outcome(lambda: client.list_actions(options(rita)))
        if exc is None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (result, exc) == ("past_auth", None)
    client.close()
    assert "user 'rita' refused: 2 calls already in flight" in capped_server.log


def test_oversized_metadata_is_refused_by_grpc_and_server_survives(auth_server: ServerProcess) -> None:
    """gRPC's hard metadata limit (16 KiB) applies; pyarrow's server API cannot change it."""
    client = flight.FlightClient(auth_server.location)
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
