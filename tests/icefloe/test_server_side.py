"""In-process beside a running server (read-only) and the DoPut ``x-icefloe-pipe`` header."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from servers import ServerProcess

import icefloe
from catalog.pipes import PipeCommit, checkpoint_property

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def test_open_beside_a_running_server_reads_and_refuses_writes(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    with icefloe.open(warehouse) as lake:
        lake.create_namespace("ns")
        lake.create_table("ns.t", schema=SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
    server = ServerProcess(warehouse).start()
    try:
        remote = icefloe.connect(server.location)
        local = icefloe.open(warehouse)
        assert local.backend.read_only  # type: ignore[attr-defined]
        event = remote.table("ns.t").append(pa.table({"id": [2]}, schema=SCHEMA))
        t = local.table("ns.t")
        assert sorted(t.scan().to_table().column("id").to_pylist()) == [1, 2]
        assert [e.seq for e in _first(t.subscribe(after=event.seq - 1))] == [event.seq]  # the server's commit
        with pytest.raises(icefloe.ReadOnly) as refused:
            t.append(pa.table({"id": [3]}, schema=SCHEMA))
        assert isinstance(refused.value, icefloe.PermissionDenied)
        with pytest.raises(icefloe.PermissionDenied):
            local.create_namespace("other")
        local.close()
        remote.close()
    finally:
        server.stop()
    assert "Traceback" not in server.log


def _first(events: object) -> list[icefloe.CommitEvent]:
    for event in events:  # type: ignore[attr-defined]
        return [event]
    return []


def _put(location: str, header: bytes) -> None:
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(headers=[(b"x-icefloe-pipe", header)])
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("ns", "t"), SCHEMA, options)
        writer.write_table(pa.table({"id": [7]}, schema=SCHEMA))
        writer.done_writing()
        raw = reader.read()
        writer.close()  # a refused DoPut raises here
        assert json.loads(raw.to_pybytes())["rows"] == 1
    finally:
        client.close()


@pytest.mark.parametrize("header", [
    b"not json",
    b'{"name": "job", "source": "ns.src", "after": 3, "source_seq": 3}',  # does not move forward
    b'{"name": "bad name", "source": "ns.src", "after": 0, "source_seq": 3}',
    b'{"name": "job", "source": "../etc", "after": 0, "source_seq": 3}',
    b'{"name": "job", "source": "ns.src", "after": 0, "source_seq": 3, "extra": 1}',
    b'{"name": "job", "source": "ns.src", "after": 0, "source_seq": true}',
    b'{"name": "job", "source": "ns.src", "after": 0, "source_seq": 3, "columns": {"a": "v"}}',
    b'{"name": "job", "source": "ns.src", "after": 0, "source_seq": 3, "columns": [1]}',
])
def test_a_malformed_pipe_header_is_invalid_argument_and_commits_nothing(table_server: ServerProcess,
                                                                         header: bytes) -> None:
    lake = icefloe.connect(table_server.location)
    head = lake.head()
    with pytest.raises(pa.ArrowInvalid, match="x-icefloe-pipe"):
        _put(table_server.location, header)
    assert lake.head() == head
    lake.close()


def test_a_pipe_header_lands_its_checkpoint_in_the_snapshot(table_server: ServerProcess) -> None:
    lake = icefloe.connect(table_server.location)
    good = PipeCommit("job", "ns.src", 3, 0, {"id": ("id",)})
    _put(table_server.location, good.to_json().encode())
    summaries = lake.backend.snapshot_summaries("ns.t")
    assert [s.get(checkpoint_property("job")) for s in summaries][-1] == "3"
    lake.close()


@pytest.fixture(scope="module")
def table_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    warehouse = tmp_path_factory.mktemp("pipeheader") / "warehouse"
    with icefloe.open(warehouse) as lake:
        lake.create_namespace("ns")
        lake.create_table("ns.t", schema=SCHEMA)
    server = ServerProcess(warehouse).start()
    try:
        yield server
    finally:
        server.stop()
        assert "Traceback" not in server.log


def test_an_expired_cursor_is_cursor_expired_on_both_backends(tmp_path: Path) -> None:
    from catalog import RocksCatalog

    warehouse = tmp_path / "warehouse"
    with icefloe.open(warehouse) as lake:
        lake.create_namespace("ns")
        t = lake.create_table("ns.t", schema=SCHEMA)
        for i in range(5):
            t.append(pa.table({"id": [i]}, schema=SCHEMA))
        head = lake.head()
    trimmer = RocksCatalog("trim", warehouse=str(warehouse), **{"commit-log.retain-count": "2"})
    trimmer.trim_commit_log()
    trimmer.close()

    def check(lake: icefloe.Lake) -> None:
        table = lake.table("ns.t")
        with pytest.raises(icefloe.CursorExpired):
            table.changes(after=1, until=head).read_all()
        with pytest.raises(icefloe.CursorExpired):
            next(iter(table.subscribe(after=1)))
        assert table.changes(after=head - 1, until=head).read_all().num_rows == 1  # retained: fine

    with icefloe.open(warehouse) as local:
        check(local)
    server = ServerProcess(warehouse).start()
    try:
        with icefloe.connect(server.location) as remote:
            check(remote)
    finally:
        server.stop()


def test_logins_tokens_and_roles_over_connect(tmp_path: Path) -> None:
    from flight_server.security.users import hash_password

    users = tmp_path / "users.toml"
    users.write_text("\n".join([
        "[users.wendy]", 'role = "write"', f'password_hash = "{hash_password("w-pass")}"', "",
        "[users.rita]", 'role = "read"', f'password_hash = "{hash_password("r-pass")}"', "",
    ]))
    warehouse = tmp_path / "warehouse"
    with icefloe.open(warehouse) as lake:
        lake.create_namespace("ns")
        lake.create_table("ns.t", schema=SCHEMA)
    server = ServerProcess(warehouse, ["--users", str(users)]).start()
    try:
        with pytest.raises(icefloe.Unauthenticated):
            icefloe.connect(server.location, user="wendy", password="wrong")
        with pytest.raises(icefloe.Unauthenticated):
            icefloe.connect(server.location).table("ns.t")
        writer = icefloe.connect(server.location, user="wendy", password="w-pass")
        event = writer.table("ns.t").append(pa.table({"id": [1]}, schema=SCHEMA))
        assert event.principal == "wendy"
        token = writer.backend.headers[0][1].decode().removeprefix("Bearer ")  # type: ignore[attr-defined]
        with icefloe.connect(server.location, token=token) as again:
            assert again.table("ns.t").scan().to_table().num_rows == 1
        reader = icefloe.connect(server.location, user="rita", password="r-pass")
        assert reader.table("ns.t").scan().to_table().num_rows == 1
        with pytest.raises(icefloe.PermissionDenied):
            reader.table("ns.t").append(pa.table({"id": [2]}, schema=SCHEMA))
        writer.close()
        reader.close()
    finally:
        server.stop()
    assert "Traceback" not in server.log


def test_a_staged_doput_refuses_a_pipe_header(table_server: ServerProcess) -> None:
    client = flight.FlightClient(table_server.location)
    header = PipeCommit("job", "ns.src", 3, 0).to_json().encode()
    options = flight.FlightCallOptions(headers=[(b"x-icefloe-pipe", header), (b"x-icefloe-stage", b"job-1")])
    # The server refuses before reading the stream: the error may surface at any client call.
    with pytest.raises(pa.ArrowInvalid, match="x-icefloe-pipe"):
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("ns", "t"), SCHEMA, options)
        writer.write_table(pa.table({"id": [7]}, schema=SCHEMA))
        writer.done_writing()
        reader.read()
        writer.close()
    client.close()
