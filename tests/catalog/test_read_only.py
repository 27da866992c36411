"""Read-only opening while another process holds the warehouse for writing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from catalog_testlib import SCHEMA, ids, rows
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.types import LongType

from catalog import CatalogReadOnlyError, RocksCatalog

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("writer_child.py")


class Writer:
    """A child process holding the warehouse read-write (as an icefloe server would)."""

    def __init__(self, warehouse: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(warehouse)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.head = self._answer()

    def _answer(self) -> int:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("writer child died")
        return int(line)

    def send(self, command: str) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        self.head = self._answer()
        return self.head

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    w = Writer(tmp_path / "warehouse")
    try:
        yield w
    finally:
        w.stop()


def test_reader_catches_up_with_writer(writer: Writer, tmp_path: Path) -> None:
    writer.send("append 0 3")
    reader = RocksCatalog("reader", warehouse=str(tmp_path / "warehouse"))
    try:
        assert reader.read_only
        assert reader.log.head() == writer.head == 2
        table = reader.load_table("ns.t")
        assert ids(table) == [0, 1, 2]
        # The writer keeps committing; every read catches up first.
        writer.send("append 3 2")
        # The commit log catches up by itself too (no other read needed first).
        assert reader.log.head() == 3
        assert [r.seq for r in reader.log.read(2)] == [3]
        writer.send("namespace later")
        assert ids(reader.load_table("ns.t")) == [0, 1, 2, 3, 4]
        assert sorted(reader.list_namespaces()) == [("later",), ("ns",)]
        assert reader.namespace_exists("later")
        table.refresh()
        assert ids(table) == [0, 1, 2, 3, 4]
        assert [r.seq for r in reader.log.read(0)] == [1, 2, 3]
        assert reader.log.head() == 3
    finally:
        reader.close()


def test_writes_on_read_only_catalog_fail_clearly(writer: Writer, tmp_path: Path) -> None:
    writer.send("append 0 3")
    warehouse = tmp_path / "warehouse"
    reader = RocksCatalog("reader", warehouse=str(warehouse))
    files_before = sorted(warehouse.rglob("*.parquet"))
    try:
        table = reader.load_table("ns.t")
        calls = [
            lambda: reader.create_namespace("x"),
            lambda: reader.drop_namespace("ns"),
            lambda: reader.update_namespace_properties("ns", updates={"a": "b"}),
            lambda: reader.create_table("ns.u", SCHEMA),
            lambda: reader.create_table_transaction("ns.u", SCHEMA),
            lambda: reader.register_table("ns.u", table.metadata_location),
            lambda: reader.rename_table("ns.t", "ns.u"),
            lambda: reader.drop_table("ns.t"),
            lambda: reader.purge_table("ns.t"),
            lambda: table.append(rows(10, 1)),
            lambda: table.update_schema().add_column("x", LongType()).commit(),
        ]
        for index, call in enumerate(calls):
            with pytest.raises(CatalogReadOnlyError, match="read-only"):
                call()
                pytest.fail(f"call {index} did not raise")
        assert issubclass(CatalogReadOnlyError, ForbiddenError)
        # Refused before any file was written, and nothing changed for the writer.
        assert sorted(warehouse.rglob("*.parquet")) == files_before
        assert writer.send("append 3 1") == 3
        assert ids(reader.load_table("ns.t")) == [0, 1, 2, 3]
    finally:
        reader.close()


def test_explicit_read_write_refused_while_held(writer: Writer, tmp_path: Path) -> None:
    with pytest.raises(CatalogReadOnlyError, match="held by another process"):
        RocksCatalog("again", warehouse=str(tmp_path / "warehouse"), **{"read-only": "false"})


def test_explicit_read_only_without_writer(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "warehouse")
    cat = RocksCatalog("w", warehouse=warehouse)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows(0, 2))
    cat.close()
    reader = RocksCatalog("r", warehouse=warehouse, **{"read-only": "true"})
    try:
        assert reader.read_only
        assert ids(reader.load_table("ns.t")) == [0, 1]
        with pytest.raises(CatalogReadOnlyError):
            reader.create_namespace("x")
    finally:
        reader.close()
    # Read-only opening of a warehouse with no catalog is an error, not an empty catalog.
    with pytest.raises(FileNotFoundError):
        RocksCatalog("r", warehouse=str(tmp_path / "nothing"), **{"read-only": "true"})


def test_read_only_while_icefloe_server_holds_warehouse(tmp_path: Path) -> None:
    from servers import ServerProcess  # tests/ is on sys.path via the top-level conftest

    warehouse = tmp_path / "warehouse"
    cat = RocksCatalog("setup", warehouse=str(warehouse))
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(rows(0, 4))
    cat.close()
    server = ServerProcess(warehouse).start()
    try:
        reader = RocksCatalog("cli", warehouse=str(warehouse))
        try:
            assert reader.read_only
            assert ids(reader.load_table("ns.t")) == [0, 1, 2, 3]
            assert reader.log.head() == 2
            with pytest.raises(CatalogReadOnlyError, match="read-only"):
                reader.load_table("ns.t").append(rows(9, 1))
        finally:
            reader.close()
    finally:
        assert server.stop() == 0


def test_caught_up_block_catches_up_once_and_its_reads_skip_theirs(tmp_path: Path) -> None:
    """``RocksCatalog.caught_up`` (a read worker's ticket): one catch-up at the start sees every
    commit made before it; reads inside the block do not catch up again; after it they do."""
    writer = RocksCatalog("w", warehouse=str(tmp_path / "wh"), **{"read-only": "false"})
    try:
        writer.create_namespace("ns")
        reader = RocksCatalog("r", warehouse=str(tmp_path / "wh"), **{"read-only": "true"})
        try:
            writer.create_table("ns.before", SCHEMA)
            with reader.caught_up():
                assert reader.table_exists("ns.before")  # committed before the block began
                writer.create_table("ns.during", SCHEMA)
                assert not reader.table_exists("ns.during")  # no second catch-up inside
            assert reader.table_exists("ns.during")  # outside, every read catches up again
        finally:
            reader.close()
    finally:
        writer.close()
