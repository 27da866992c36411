"""Connectors inside ``icefloe serve``: from the config file, with metrics, the feed, lineage and
a durable pause; the ``icefloe ingest`` CLI; roles and precise errors for bad requests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from cli_runner import cli_env
from lineage_collector import Collector
from servers import ServerProcess, make_tables

from catalog import RocksCatalog

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def write(path: Path, first: int, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    numbers = range(first, first + count)
    pq.write_table(pa.table({"id": list(numbers), "name": [f"n{i}" for i in numbers]}), path)


def cli(proc: ServerProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flight_server.cli", "ingest", *args, "--uri", proc.location],
                          capture_output=True, text=True, env=cli_env(), input=stdin, timeout=120)


def count(proc: ServerProcess, table: str = "ns.t") -> int:
    import adbc_driver_flightsql.dbapi as dbapi

    with dbapi.connect(proc.location) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        return int(cur.fetchone()[0])


def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_config_connector_in_serve_metrics_lineage_and_durable_pause(tmp_path: Path) -> None:
    warehouse, src = tmp_path / "warehouse", tmp_path / "src"
    make_tables(warehouse, ["ns.t", "ns.c"], SCHEMA)
    write(src / "a.parquet", 0, 4)
    config = tmp_path / "connectors.toml"
    # Two connectors: the built-in files source, and a class of the operator's own (the docs' example).
    config.write_text(f'[connectors.orders]\ntable = "ns.t"\nsource = "files"\npoll_s = 0.1\n\n'
                      f'[connectors.orders.options]\npath = "{src}"\n\n'
                      '[connectors.count]\ntable = "ns.c"\nsource = "ingest_example_connector:Countdown"\n'
                      'options = { start = 7 }\n')
    collector = Collector().up()
    proc = ServerProcess(warehouse, ["--ingest-config", str(config), "--metrics-port", "0"],
                         env={"OPENLINEAGE_URL": collector.url, "PYTHONPATH": str(Path(__file__).parent)}).start()
    try:
        wait_for(lambda: count(proc) == 4)
        wait_for(lambda: count(proc, "ns.c") == 7)
        status = json.loads(cli(proc, "status", "orders").stdout)
        assert status["origin"] == "config" and status["state"] == "up" and status["rows"] == 4
        assert status["checkpoint"]["step"] == 1 and list(status["checkpoint"]["positions"]) == ["a.parquet"]
        port = next(line for line in proc.log_lines if "icefloe metrics on" in line).rsplit(":", 1)[1].split("/")[0]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        assert 'icefloe_ingest_rows_total{connector="orders"} 4.0' in metrics
        assert 'icefloe_ingest_state{connector="orders",state="up"} 1.0' in metrics
        # Lineage: the ingest commit's run names the source folder as its input dataset.
        wait_for(lambda: any(e["job"]["name"] == "icefloe.ingest.orders" and e["eventType"] == "COMPLETE"
                             for e in collector.snapshot()))
        event = next(e for e in collector.snapshot() if e["job"]["name"] == "icefloe.ingest.orders")
        assert {"namespace": "file", "name": str(src)} in [
            {"namespace": i["namespace"], "name": i["name"]} for i in event["inputs"]]
        # A durable pause: a restart keeps it paused; a new file waits until resumed.
        assert json.loads(cli(proc, "pause", "orders").stdout)["state"] == "paused"
        proc.restart()
        write(src / "b.parquet", 4, 2)
        time.sleep(1.0)
        assert count(proc) == 4
        assert json.loads(cli(proc, "status", "orders").stdout)["state"] == "paused"
        assert cli(proc, "resume", "orders").returncode == 0
        wait_for(lambda: count(proc) == 6)
        removed = cli(proc, "remove", "orders")
        assert removed.returncode == 1 and "config file" in removed.stderr
        # Connectors added with the CLI's flags.
        added = cli(proc, "add", "web", "--table", "ns.t", "--source", "http", "--url", "http://127.0.0.1:9/items",
                    "--records", "data", "--rate", "2", "--option", "cursor_param=after", "--paused")
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["state"] == "paused"
        assert [c["name"] for c in json.loads(cli(proc, "list").stdout)] == ["orders", "count", "web"]
        wrong = cli(proc, "add", "x", "--table", "ns.t", "--source", "http", "--path", "/data")
        assert wrong.returncode == 2 and "--path is not an option of --source http" in wrong.stderr
        assert json.loads(cli(proc, "remove", "web").stdout) == {"name": "web", "removed": True}
    finally:
        proc.stop()
        collector.down()
    # The feed's record of the commit: an ordinary append, with the ingest in its extra.
    catalog = RocksCatalog("check", warehouse=str(warehouse), **{"read-only": "true"})
    try:
        records = [catalog.log.get(seq) for seq in range(1, catalog.log.head() + 1)]
        ingested = [r for r in records if r is not None and r.extra.get("job_name") == "icefloe.ingest.orders"]
        assert [r.operation for r in ingested] == ["append", "append"]
        assert [r.added_rows for r in ingested] == [4, 2]
    finally:
        catalog.close()


def test_bad_config_file_stops_the_start(tmp_path: Path) -> None:
    config = tmp_path / "connectors.toml"
    config.write_text('[connectors.x]\ntable = "ns.t"\nsource = "ftp"\n')
    proc = ServerProcess(tmp_path / "warehouse", ["--ingest-config", str(config)])
    with pytest.raises(RuntimeError, match=r"\[connectors.x\] in .*unknown source 'ftp'"):
        proc.start(timeout=60)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "flight_server" / "security"))
    from security_support import PASSWORDS, write_users_file

    folder = tmp_path_factory.mktemp("ingest-secured")
    users = write_users_file(folder / "users.toml")
    make_tables(folder / "warehouse", ["ns.t"], SCHEMA)
    (folder / "src").mkdir()
    proc = ServerProcess(folder / "warehouse", ["--users", str(users)]).start()
    try:
        yield proc, PASSWORDS, folder
    finally:
        proc.stop()


def call(proc: ServerProcess, user: str, password: str, name: str, body: Any) -> Any:
    client = flight.connect(proc.location)
    try:
        token = client.authenticate_basic_token(user, password)
        options = flight.FlightCallOptions(headers=[token])
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return json.loads(list(client.do_action(flight.Action(f"icefloe.ingest.{name}", raw), options))[0].body
                          .to_pybytes())
    finally:
        client.close()


def test_roles_and_precise_errors(secured: Any) -> None:
    proc, passwords, folder = secured
    admin = ("alice", passwords["alice"])
    writer = ("wendy", passwords["wendy"])
    reader = ("rita", passwords["rita"])
    # Paused: only the passes asked for below run (no background pass racing them).
    spec = {"name": "c1", "table": "ns.t", "source": "files", "options": {"path": str(folder / "src")},
            "paused": True}
    with pytest.raises(flight.FlightUnauthorizedError):
        call(proc, *writer, "add", spec)
    with pytest.raises(flight.FlightUnauthorizedError):
        call(proc, *reader, "status", {})
    assert call(proc, *admin, "add", spec)["state"] == "paused"
    write(folder / "src" / "a.parquet", 0, 3)
    assert call(proc, *writer, "run", {"name": "c1", "once": True})["run"]["rows"] == 3
    backfill = call(proc, *writer, "backfill", {"name": "c1", "start": "a.*", "end": None})
    assert backfill["backfill"]["rows"] == 3 and backfill["checkpoint"]["step"] == 1
    assert call(proc, *writer, "backfill", {"name": "c1", "start": "a.*", "end": None})["backfill"]["rows"] == 0
    with pytest.raises(pa.ArrowInvalid, match="backfill start and end must be strings"):
        call(proc, *writer, "backfill", {"name": "c1", "start": 5})
    cases: list[tuple[Any, type[BaseException], str]] = [
        ({**spec}, pa.ArrowException, "ALREADY_EXISTS: ingest connector c1 already exists"),
        ({**spec, "name": "c2", "table": "ns.nope"}, pa.ArrowKeyError, "table ns.nope does not exist"),
        ({**spec, "name": "c2", "source": "ftp"}, pa.ArrowInvalid, "unknown source 'ftp'"),
        ({**spec, "name": "bad name"}, pa.ArrowInvalid, "a connector name must be"),
        ({**spec, "name": "c2", "options": {"path": str(folder / "warehouse")}}, flight.FlightUnauthorizedError,
         "may not read the server's warehouse"),
        ({**spec, "name": "c2", "options": {"path": "/x", "colour": 1}}, pa.ArrowInvalid, "unknown files option"),
        ({**spec, "name": "c2", "max_rows": 0}, pa.ArrowInvalid, "max_rows must be"),
        (b"{not json", pa.ArrowInvalid, "takes a JSON object"),
    ]
    for body, error, message in cases:
        with pytest.raises(error, match=message):
            call(proc, *admin, "add", body)
    with pytest.raises(pa.ArrowKeyError, match="no ingest connector named nope"):
        call(proc, *writer, "status", {"name": "nope"})
    # Nothing of the refused requests was added or committed, and the server is still serving.
    assert [c["name"] for c in call(proc, *writer, "list", {})] == ["c1"]
    assert call(proc, *writer, "status", {"name": "c1"})["checkpoint"]["step"] == 1
    assert call(proc, *admin, "remove", {"name": "c1"}) == {"name": "c1", "removed": True}
    # The commit is an ordinary one, made in the name of who added the connector.
    catalog = RocksCatalog("check", warehouse=str(folder / "warehouse"), **{"read-only": "true"})
    try:
        records = [catalog.log.get(seq) for seq in range(1, catalog.log.head() + 1)]
        [record] = [r for r in records if r is not None and r.extra.get("job_name") == "icefloe.ingest.c1"]
        assert (record.operation, record.principal, record.added_rows) == ("append", "alice", 3)
        [backfilled] = [r for r in records if r is not None and r.extra.get("job_name") == "icefloe.ingest.c1.backfill"]
        assert backfilled.principal == "alice" and backfilled.added_rows == 3
        assert record.extra["input_datasets"] == [{"namespace": "file", "name": str(folder / "src")}]
    finally:
        catalog.close()


def test_a_stored_connector_that_cannot_run_does_not_stop_the_server(tmp_path: Path) -> None:
    from catalog import keys

    warehouse = tmp_path / "warehouse"
    make_tables(warehouse, ["ns.t"], SCHEMA)
    catalog = RocksCatalog("setup", warehouse=str(warehouse), **{"read-only": "false"})
    try:  # as a newer or older server might have left it: an option this one does not know
        bad = {"name": "old", "table": "ns.t", "source": "files", "options": {"path": "/x", "colour": "red"}}
        catalog.store.write({keys.INGEST_DEFINITION + b"old": json.dumps(bad).encode()})
    finally:
        catalog.close()
    proc = ServerProcess(warehouse).start()
    try:
        assert json.loads(cli(proc, "list").stdout) == []
        assert "ingest connector old cannot run and is left out: unknown files option" in proc.log
    finally:
        proc.stop()
