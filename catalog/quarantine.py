"""The gate's side of an append: checked batches in, quarantined rows into their own table.

``gated`` runs every batch of an append through the table's ``GateSession`` before it reaches
the data writer, so a ``block`` failure stops the stream before anything is committed (the
append's files are then deleted as for any refused input). Rows failing a ``quarantine``
expectation are written by a ``QuarantineWriter`` into the table ``ns.t__quarantine`` and the
appender lands that table's new snapshot together with the target's (``quarantine_change``,
then ``RocksCatalog.commit_tables``): one RocksDB batch holds both, so the bad rows are kept
exactly when the good ones land.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.manifest import DataFile

from catalog.durable_io import DurableFileIO
from catalog.expectations import (
    QUARANTINE_SCHEMA,
    QUARANTINE_SUFFIX,
    ExpectationUnusable,
    GateSession,
    QualityBlocked,
    QualityGate,
    expectations_of,
    quarantine_identifier,
    summary,
)
from catalog.writer import DataFileWriter

if TYPE_CHECKING:
    from catalog.rocks_catalog import RocksCatalog

logger = logging.getLogger("icefloe.catalog.quarantine")


class QuarantineWriter:
    """Writes one append's quarantined rows (fsync'd with the append's own files at commit)."""

    def __init__(self, catalog: RocksCatalog, target: tuple[str, ...]) -> None:
        self.catalog = catalog
        self.identifier = quarantine_identifier(target)
        self._writer: DataFileWriter | None = None
        self.rows = 0

    def write(self, rows: pa.Table) -> None:
        if self._writer is None:
            try:
                self.catalog.create_table(self.identifier, schema=QUARANTINE_SCHEMA)
            except TableAlreadyExistsError:
                pass
            table = self.catalog.load_table(self.identifier)
            self._writer = DataFileWriter(table.metadata, table.io, QUARANTINE_SCHEMA)
        for batch in rows.to_batches():
            self._writer.write(batch)
        self.rows += rows.num_rows

    def finish(self) -> list[DataFile]:
        return self._writer.finish(sync=False) if self._writer is not None else []

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()


def gated(session: GateSession, batches: Iterable[pa.RecordBatch],
          quarantine: QuarantineWriter) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        verdict = session.check(batch)
        if verdict.quarantined is not None and verdict.quarantined.num_rows:
            quarantine.write(verdict.quarantined)
        if verdict.good.num_rows:
            yield verdict.good


@dataclass
class QuarantineFiles:
    """What an append adds to its quarantine table, landed in the target's commit batch."""

    identifier: tuple[str, ...]
    files: list[DataFile]
    rows: int
    append_id: str


class AppendGate:
    """The quality gate of one append (``Appender.append_stream``): a no-op for a table that
    declares no expectations; otherwise a ``GateSession`` over its batches and a
    ``QuarantineWriter`` for the rows it diverts."""

    def __init__(self, catalog: RocksCatalog, identifier: tuple[str, ...], properties: dict[str, str],
                 gate: QualityGate | None, source_position: str | None,
                 on_quality: Callable[[str, dict[str, Any]], None] | None) -> None:
        self.qualified = ".".join(identifier)
        self.on_quality = on_quality
        self.quarantine = QuarantineWriter(catalog, identifier)
        self.append_id = uuid.uuid4().hex
        self.session: GateSession | None = None
        expectations = expectations_of(properties)
        if expectations and gate is None:
            raise ExpectationUnusable(f"{self.qualified} declares quality expectations and this process "
                                      "has no quality gate to evaluate them")
        if expectations and gate is not None:
            self.session = gate.session(self.qualified, expectations, source_position, self.append_id)

    def wrap(self, batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        return batches if self.session is None else gated(self.session, batches, self.quarantine)

    def finish(self, extra: dict[str, Any] | None) -> tuple[QuarantineFiles | None, dict[str, Any] | None]:
        """After the last batch: the quarantined files (None: none) and the commit record's
        ``extra`` with the ``quality`` results."""
        if self.session is None:
            return None, extra
        files = self.quarantine.finish()
        quality = summary(self.session.results(), self.append_id, self.quarantine.rows)
        if self.on_quality is not None:
            self.on_quality(self.qualified, quality)
        quarantined = QuarantineFiles(self.quarantine.identifier, files, self.quarantine.rows, self.append_id)
        return (quarantined if files else None), {**(extra or {}), "quality": quality}

    def abort(self, exc: BaseException) -> None:
        self.quarantine.abort()
        if isinstance(exc, QualityBlocked) and self.on_quality is not None:
            self.on_quality(self.qualified, summary(exc.results, self.append_id, 0))

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


def with_quarantine(catalog: RocksCatalog, table: Any, tx: Any, quarantined: QuarantineFiles | None,
                    unsynced: list[str]) -> Callable[[], Any]:
    """How ``tx`` (the target's append) lands: alone, or with its quarantined rows' snapshot in
    one ``commit_tables`` batch. Adds the quarantine's files to ``unsynced`` (fsync'd first)."""
    if quarantined is None:
        return cast("Callable[[], Any]", tx.commit_transaction)
    snapshot_id = next((u.snapshot.snapshot_id for u in tx._updates if hasattr(u, "snapshot")), None)
    change, quarantine_unsynced = quarantine_change(catalog, quarantined, snapshot_id)
    unsynced.extend(quarantine_unsynced)
    fields = {"extra": {"quarantine_of": ".".join(table.name()), "quarantined_rows": quarantined.rows}}
    return lambda: catalog.commit_tables([(table.name(), tx._requirements, tx._updates), change],
                                         record_fields=[{}, fields])


def quarantine_change(catalog: RocksCatalog, quarantined: QuarantineFiles,
                      target_snapshot_id: int | None) -> tuple[Any, list[str]]:
    """The quarantine table's change for ``commit_tables`` and the files it must fsync first."""
    table = catalog.load_table(quarantined.identifier)
    io = table.io
    if isinstance(io, DurableFileIO):
        io.defer_fsync()
    tx = table.transaction()
    properties = {"icefloe.quarantine.append-id": quarantined.append_id}
    if target_snapshot_id is not None:
        properties["icefloe.quarantine.target-snapshot-id"] = str(target_snapshot_id)
    with tx.update_snapshot(snapshot_properties=properties).fast_append() as append:
        for data_file in quarantined.files:
            append.append_data_file(data_file)
    unsynced = [f.file_path for f in quarantined.files]
    if isinstance(io, DurableFileIO):
        unsynced.extend(io.take_deferred())
    return (quarantined.identifier, tx._requirements, tx._updates), unsynced


class RefusingQuarantine(QuarantineWriter):
    """For writes that cannot divert rows (staged appends, which commit later and elsewhere;
    SQL UPDATE / MERGE, which change rows in place; writes inside a transaction): a
    ``quarantine`` failure refuses the write, as ``block`` does."""

    def __init__(self, catalog: RocksCatalog, target: tuple[str, ...], write_kind: str) -> None:
        super().__init__(catalog, target)
        self.write_kind = write_kind

    def write(self, rows: pa.Table) -> None:
        names = sorted({n for value in rows.column("_expectation").to_pylist() for n in str(value).split(",")})
        sample = rows.column("_row").to_pylist()[:3]
        raise QualityBlocked(
            f"write to {'.'.join(self.identifier[:-1] + (self.identifier[-1][: -len(QUARANTINE_SUFFIX)],))} refused "
            f"by its quality gate: expectation {', '.join(repr(n) for n in names)} failed on {rows.num_rows} rows, "
            f"e.g. {', '.join(sample)}; a {self.write_kind} cannot quarantine rows, so it is refused; nothing was "
            "committed", [])


def checked_without_quarantine(gate: QualityGate | None, catalog: RocksCatalog, identifier: tuple[str, ...],
                               properties: dict[str, str], batches: Iterable[pa.RecordBatch],
                               write_kind: str) -> Iterator[pa.RecordBatch]:
    """``batches`` through the table's gate, ``quarantine`` acting as ``block`` (see above)."""
    expectations = expectations_of(properties)
    if not expectations:
        yield from batches
        return
    if gate is None:
        raise ExpectationUnusable(f"{'.'.join(identifier)} declares quality expectations and this process "
                                  "has no quality gate to evaluate them")
    session = gate.session(".".join(identifier), expectations, None, uuid.uuid4().hex)
    try:
        yield from gated(session, batches, RefusingQuarantine(catalog, identifier, write_kind))
    finally:
        session.close()


def check_table(gate: QualityGate | None, catalog: RocksCatalog, identifier: tuple[str, ...],
                properties: dict[str, str], rows: pa.Table, write_kind: str) -> None:
    """Raise QualityBlocked / ExpectationUnusable unless every row of ``rows`` passes."""
    for _ in checked_without_quarantine(gate, catalog, identifier, properties, rows.to_batches(), write_kind):
        pass
