"""The warehouse's path rules (catalog.sandbox) on real folders: symlinks, ``..``, escapes,
reserved entries, object-store keys; and the in-process catalog keeping to them."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from catalog_testlib import SCHEMA, rows

from catalog import RocksCatalog
from catalog.sandbox import ConfinedFileIO, InvalidLocationError, OutsideTableError, Warehouse


@pytest.fixture(params=["path", "file-uri"])
def site(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Warehouse, Path, Path]:
    """The warehouse named as a plain path and as a ``file://`` URI (what RocksCatalog passes):
    the rules are the same, and both spellings of a location inside it are the same file."""
    wh = tmp_path / "wh"
    (wh / "ns" / "t" / "data").mkdir(parents=True)
    (wh / "catalog.rocksdb").mkdir()
    (wh / ".icefloe-token.key").write_text("k")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    return Warehouse(str(wh) if request.param == "path" else f"file://{wh}"), wh, outside


def test_a_table_folder_inside_the_warehouse(site: tuple[Warehouse, Path, Path]) -> None:
    warehouse, wh, _ = site
    assert warehouse.table_root(f"{wh}/ns/t") == os.path.realpath(wh / "ns" / "t")
    assert warehouse.table_root(f"file://{wh}/ns/t/") == os.path.realpath(wh / "ns" / "t")
    assert warehouse.table_root(f"{wh}/ns/a%41 b") == os.path.realpath(wh / "ns") + "/a%41 b"  # odd, harmless
    root = warehouse.table_root(f"{wh}/ns/t")
    # A table's files in either spelling are the same files, and only those of its folder.
    for spelling in (f"{wh}/ns/t/data/f.parquet", f"file://{wh}/ns/t/data/f.parquet"):
        assert warehouse.confine(spelling, root) == f"{root}/data/f.parquet"
    for other in (f"file://{wh}/ns/u/data/f.parquet", f"{wh}/ns/u/data/f.parquet", f"file://{wh}/ns/t/../u/f"):
        with pytest.raises(OutsideTableError):
            warehouse.confine(other, root)
    assert warehouse.as_uri(f"{wh}/ns/t") == f"file://{wh}/ns/t"
    assert warehouse.as_uri(f"file://{wh}/ns/t") == f"file://{wh}/ns/t"


@pytest.mark.parametrize("location", [
    "{wh}", "file://{wh}", "{wh}/", "{wh}/..", "{wh}/../outside/t", "{wh}/ns/../../outside",
    "file://{wh}/ns/%2e%2e/%2E%2E/outside", "{wh}/ns%2F..%2F..", "{wh}/ns/t%00", "{wh}/catalog.rocksdb/t",
    "{wh}/catalog.rocksdb", "{wh}/.icefloe-token.key", "{wh}/.icefloe-other/t", "relative/t", "s3://b/t",
    "file://otherhost{wh}/ns/t", "file://{wh}/ns/t?x=1", "file://{wh}/ns/t#frag", "",
    "file:///etc/passwd", "file:/etc", "file://localhost/etc", "file:{wh}/../outside/t", "file:relative/t",
    "file://{wh}/ns/..%2f..%2foutside", "{wh}/ns/%2e%2e/%2e%2e/outside",
])
def test_refused_table_locations(site: tuple[Warehouse, Path, Path], location: str) -> None:
    warehouse, wh, _ = site
    with pytest.raises(InvalidLocationError):
        warehouse.table_root(location.format(wh=wh))


def test_symlinks_are_followed_to_where_they_lead(site: tuple[Warehouse, Path, Path]) -> None:
    warehouse, wh, outside = site
    (wh / "ns" / "link").symlink_to(outside, target_is_directory=True)
    (wh / "ns" / "t" / "data" / "file-link").symlink_to(outside / "secret")
    (wh / "ns" / "t" / "data" / "inner").symlink_to(wh / "ns" / "t", target_is_directory=True)
    root = warehouse.table_root(f"{wh}/ns/t")
    with pytest.raises(InvalidLocationError):
        warehouse.table_root(f"{wh}/ns/link/t")
    with pytest.raises(OutsideTableError):
        warehouse.confine(f"{wh}/ns/t/data/file-link", root)
    # ".." after a symlink: the lexical and the real reading differ, so it is refused.
    with pytest.raises(OutsideTableError):
        warehouse.confine(f"{wh}/ns/link/../t/data/x.parquet", root)
    assert warehouse.confine(f"{wh}/ns/t/data/inner/data/x.parquet", root).startswith(root + "/")
    assert warehouse.confine(f"{wh}/ns/t/data/../data/x.parquet", root) == f"{root}/data/x.parquet"


def test_a_folder_turned_into_a_symlink_is_seen_at_once(site: tuple[Warehouse, Path, Path]) -> None:
    warehouse, wh, outside = site
    root = warehouse.table_root(f"{wh}/ns/t")
    path = f"{wh}/ns/t/data/x.parquet"
    warehouse.confine(path, root)
    (wh / "ns" / "t" / "data").rmdir()
    (wh / "ns" / "t" / "data").symlink_to(outside, target_is_directory=True)
    warehouse._dirs.clear()  # the folder cache lives one second; a test need not wait it out
    with pytest.raises(OutsideTableError):
        warehouse.confine(path, root)


def test_the_warehouse_wide_io_never_touches_reserved_entries(site: tuple[Warehouse, Path, Path]) -> None:
    warehouse, wh, _ = site
    io = ConfinedFileIO({}, warehouse, None)
    for path in (f"{wh}/catalog.rocksdb/CURRENT", f"{wh}/.icefloe-token.key"):
        with pytest.raises(OutsideTableError):
            io.new_input(path)
        with pytest.raises(OutsideTableError):
            io.delete(path)
    assert (wh / ".icefloe-token.key").read_text() == "k"


def test_object_store_rules() -> None:
    warehouse = Warehouse("s3://bucket/prefix")
    root = warehouse.table_root("s3://bucket/prefix/ns/t")
    assert root == "s3://bucket/prefix/ns/t"
    assert warehouse.confine("s3a://bucket/prefix/ns/t/data/f.parquet", root) == "s3://bucket/prefix/ns/t/data/f.parquet"
    for bad in ("s3://bucket/prefix", "s3://bucket/prefix2/t", "s3://other/prefix/ns/t", "s3://bucket/prefix/ns/../x",
                "s3://bucket/prefix/ns/%2e%2e/x", "/local/path", "file:///prefix/ns/t"):
        with pytest.raises(InvalidLocationError):
            warehouse.table_root(bad)
    with pytest.raises(OutsideTableError):
        warehouse.confine("s3://bucket/prefix/ns/u/data/f.parquet", root)


def test_the_embedded_catalog_keeps_to_the_sandbox(tmp_path: Path) -> None:
    cat = RocksCatalog("t", warehouse=str(tmp_path / "wh"))
    try:
        cat.create_namespace("ns")
        table = cat.create_table("ns.t", SCHEMA)
        table.append(rows(0, 3))
        assert isinstance(table.io, ConfinedFileIO)
        with pytest.raises(OutsideTableError):
            table.io.new_output(str(tmp_path / "outside.bin"))
        with pytest.raises(InvalidLocationError, match="write.data.path"):
            table.transaction().set_properties({"write.data.path": str(tmp_path)}).commit_transaction()
        with pytest.raises(InvalidLocationError):
            cat.create_table("ns.u", pa.schema([("id", pa.int64())]), location=str(tmp_path / "wh"))
        with pytest.raises(InvalidLocationError, match="namespace location"):
            cat.create_namespace("n2", {"location": str(tmp_path)})
        assert cat.load_table("ns.t").scan().to_arrow().num_rows == 3
    finally:
        cat.close()
