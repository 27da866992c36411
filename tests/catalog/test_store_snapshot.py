"""``RocksStore.snapshot``: the catalog database as it was when taken (what a Flight SQL
transaction resolves tables against from BEGIN on)."""

from __future__ import annotations

from pathlib import Path

from catalog.store import RocksStore


def test_a_snapshot_reads_the_database_as_it_was(tmp_path: Path) -> None:
    store = RocksStore(str(tmp_path / "db"))
    try:
        store.write({b"t/a": b"v1", b"t/gone": b"x"})
        snapshot = store.snapshot()
        store.write({b"t/a": b"v2", b"t/new": b"n"}, deletes=(b"t/gone",))
        assert (snapshot.get(b"t/a"), snapshot.get(b"t/new"), snapshot.get(b"t/gone")) == (b"v1", None, b"x")
        assert (store.get(b"t/a"), store.get(b"t/new"), store.get(b"t/gone")) == (b"v2", b"n", None)
        assert snapshot.get(b"never") is None
    finally:
        store.close()
