"""``durable_io.write_new`` and ``remove``: one-write local files that are as durable as the
FileIO's own streams, and object-store locations through the FileIO."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from catalog import durable_io
from catalog.durable_io import DurableFileIO, PendingSync, deferred_fsync, fsync_all, remove, write_new


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    synced: list[str] = []
    real = durable_io.fsync_path

    def record(path: str) -> None:
        synced.append(os.path.abspath(path))
        real(path)

    monkeypatch.setattr(durable_io, "fsync_path", record)
    return synced


def test_a_new_file_and_its_folder_are_durable_before_it_returns(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    synced = _recording(monkeypatch)
    target = tmp_path / "new" / "folder" / "f.json"  # folders are made
    write_new(DurableFileIO(), f"file://{target}", b"x" * 100_000)
    assert target.read_bytes() == b"x" * 100_000
    assert str(target) in synced and str(target.parent) in synced


def test_in_a_deferral_scope_the_fsync_waits_for_fsync_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = _recording(monkeypatch)
    target = tmp_path / "f.json"
    with deferred_fsync() as pending:
        write_new(DurableFileIO(), str(target), b"{}")
        assert pending == [str(target)]
        fsync_all(list(pending))
    assert synced.count(str(target)) == 1 and str(tmp_path) in synced


def test_a_pending_sync_starts_the_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = _recording(monkeypatch)
    pending = PendingSync()
    write_new(DurableFileIO(), str(tmp_path / "m.avro"), b"abc", pending)
    fsync_all(list(pending))
    assert synced.count(str(tmp_path / "m.avro")) == 1


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    with pytest.raises(FileExistsError):
        write_new(DurableFileIO(), str(target), b"new")
    assert target.read_bytes() == b"old"


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        write_new(DurableFileIO(), str(tmp_path / "f"), b"data")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_another_file_io_writes_through_its_own_streams(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    write_new(io, str(tmp_path / "f"), b"through pyarrow")
    assert (tmp_path / "f").read_bytes() == b"through pyarrow"
    remove(io, str(tmp_path / "f"))
    assert not (tmp_path / "f").exists()


def test_remove_deletes_local_files_and_reports_missing_ones(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"1")
    remove(DurableFileIO(), f"file://{tmp_path / 'f'}")
    assert not (tmp_path / "f").exists()
    with pytest.raises(FileNotFoundError):
        remove(DurableFileIO(), str(tmp_path / "f"))
