"""The quality gate on connectors inside ``icefloe serve``: a ``block`` failure keeps the
checkpoint where it was (the rows are not taken, the connector says why); ``quarantine`` lands
the good rows and keeps the bad ones with the connector's source position, in one commit."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from servers import ServerProcess
from test_ingest_server import cli, count, wait_for

from catalog import RocksCatalog

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64())])


def test_block_holds_the_checkpoint_and_quarantine_records_the_position(tmp_path: Path) -> None:
    warehouse, src = tmp_path / "warehouse", tmp_path / "src"
    src.mkdir()
    cat = RocksCatalog("setup", warehouse=str(warehouse), **{"read-only": "false"})
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.blocked", SCHEMA, properties={"icefloe.expect.positive": "amount > 0"})
        cat.create_table("ns.kept", SCHEMA, properties={"icefloe.expect.positive": "amount > 0",
                                                         "icefloe.expect.positive.on-failure": "quarantine"})
    finally:
        cat.close()
    pq.write_table(pa.table({"id": [1, 2, 3], "amount": [5.0, -1.0, 2.0]}, SCHEMA), src / "a.parquet")
    config = tmp_path / "connectors.toml"
    config.write_text("".join(
        f'[connectors.{name}]\ntable = "ns.{name}"\nsource = "files"\npoll_s = 0.1\n\n'
        f'[connectors.{name}.options]\npath = "{src}"\n\n' for name in ("blocked", "kept")))
    proc = ServerProcess(warehouse, ["--ingest-config", str(config)]).start()
    try:
        wait_for(lambda: count(proc, "ns.kept") == 2)
        wait_for(lambda: json.loads(cli(proc, "status", "blocked").stdout)["state"] == "failed")
        status = json.loads(cli(proc, "status", "blocked").stdout)
        assert "'positive' (amount > 0) failed on 1 of 3 rows" in status["message"]
        assert status["checkpoint"]["step"] == 0 and status["rows"] == 0
        assert count(proc, "ns.blocked") == 0
        kept = json.loads(cli(proc, "status", "kept").stdout)
        assert kept["state"] == "up" and kept["checkpoint"]["step"] == 1

        import adbc_driver_flightsql.dbapi as dbapi

        with dbapi.connect(proc.location) as conn, conn.cursor() as cur:
            cur.execute("SELECT _row, _expectation, _source_position FROM ns.kept__quarantine")
            ((row, expectation, position),) = cur.fetchall()
        assert json.loads(row) == {"id": 2, "amount": -1.0} and expectation == "positive"
        assert list(json.loads(position)) == ["a.parquet"]
        # The blocked connector retries and stays blocked: the bad file is never half-taken.
        proc.restart()
        wait_for(lambda: json.loads(cli(proc, "status", "blocked").stdout)["state"] == "failed")
        assert count(proc, "ns.blocked") == 0 and count(proc, "ns.kept") == 2
    finally:
        proc.stop()
    assert "Traceback" not in proc.log
