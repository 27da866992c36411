"""The files connector: every new Parquet / CSV / JSON-lines file under a folder, once.

A file's identity is its path relative to the folder plus its version ``SIZE:MTIME_NS``: each
file is one partition of the checkpoint and its position is the version committed last. A file
whose version is not in the checkpoint is read as one envelope (a Parquet file of several row
groups larger than a commit, a few row groups at a time, positions ``VERSION@N``); a file rewritten in
place (new size or mtime) is a new version and, by default (``rewritten = "new-version"``),
ingested again; ``rewritten = "ignore"`` takes only a path's first version.

Options (``icefloe ingest add --source files`` flags, or keys of a server config entry):

``path``       the folder (required); an ``s3://bucket/prefix`` reads through pyarrow's S3
               filesystem with ``s3_endpoint`` / ``s3_region`` and the ``AWS_*`` credentials.
``pattern``    an fnmatch glob over the relative path (``*`` also crosses folders);
               default ``*`` (hidden files and names starting with ``_`` are always skipped).
``format``     ``parquet`` | ``csv`` | ``jsonl``; default: from each file's extension.
``marker``     a completion marker's file name (e.g. ``_SUCCESS``): a file is only taken once
               its folder holds the marker, so half-written folders are never read.
``rewritten``  ``new-version`` (default) | ``ignore``.
``max_tracked`` how many files the checkpoint names one by one (default 5000). Beyond that, the
               oldest are folded into a watermark (their newest mtime): a file whose mtime is
               not after the watermark and that is not named counts as taken. So a checkpoint
               stays bounded; the price is that a file appearing later with an old mtime (a
               copy that keeps its mtime) is not taken once the watermark has passed it.

A backfill range is a pair of globs (``start`` = the pattern to read again; ``end`` unused): the
files matching it are read again once each under the backfill's own checkpoint, and again only
if their version changes.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from icefloe.ingest.contract import (
    BackfillRange,
    Checkpoint,
    Connector,
    Envelope,
    Health,
    InvalidOptions,
    ReportedHealth,
    SourceDataError,
    SourceUnavailable,
    State,
)

logger = logging.getLogger("icefloe.ingest.files")

FORMATS = {".parquet": "parquet", ".parq": "parquet", ".pq": "parquet", ".csv": "csv",
           ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}
OPTIONS = {"path", "pattern", "format", "marker", "rewritten", "s3_endpoint", "s3_region", "max_tracked"}
# The checkpoint partition holding the watermark (no file's relative path is empty).
WATERMARK = ""


@dataclass(frozen=True)
class SourceFile:
    relative: str
    full: str
    size: int
    mtime_ns: int

    @property
    def version(self) -> str:
        return f"{self.size}:{self.mtime_ns}"


class FilesConnector(Connector):
    kind = "files"
    known_options = frozenset(OPTIONS)

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        path = self.options.get("path")
        if not isinstance(path, str) or not path:
            raise InvalidOptions("the files connector needs path = a folder or an s3://bucket/prefix")
        self.pattern = _text(self.options, "pattern", "*")
        self.format = _text(self.options, "format", "")
        if self.format and self.format not in {"parquet", "csv", "jsonl"}:
            raise InvalidOptions("format must be parquet, csv or jsonl")
        self.marker = _text(self.options, "marker", "")
        if "/" in self.marker:
            raise InvalidOptions("marker is a file name, not a path")
        self.rewritten = _text(self.options, "rewritten", "new-version")
        if self.rewritten not in {"new-version", "ignore"}:
            raise InvalidOptions("rewritten must be new-version or ignore")
        tracked = self.options.get("max_tracked", 5000)
        if isinstance(tracked, str) and tracked.isdigit():
            tracked = int(tracked)
        if isinstance(tracked, bool) or not isinstance(tracked, int) or tracked < 1:
            raise InvalidOptions("max_tracked must be an integer >= 1")
        self.max_tracked = tracked
        self._fs, self._root = _filesystem(path, self.options)
        self._uri = path if path.startswith("s3://") else "file://" + os.path.abspath(path)
        self._checkpoint = Checkpoint()
        self._backfill: BackfillRange | None = None
        self._health = ReportedHealth()

    def source_uri(self) -> str:
        return self._uri

    def discover(self) -> pa.Schema:
        files = self._list()
        if not files:
            return pa.schema([])
        return self._read(files[-1]).schema

    def open(self, checkpoint: Checkpoint, backfill: BackfillRange | None = None) -> None:
        self._checkpoint = checkpoint
        self._backfill = backfill

    def read(self, max_rows: int) -> Iterator[Envelope]:
        files = self._list()
        todo = [f for f in files if self._wanted(f)]
        self._health.set(Health(State.UP, pending=len(todo)))
        taken = 0
        for index, source_file in enumerate(todo):
            if taken >= max_rows:
                break
            # Files still to come bound what may be folded into the watermark.
            later = todo[index + 1].mtime_ns if index + 1 < len(todo) else None
            retired = self._retire(source_file, later)
            if retired:
                positions = {k: v for k, v in self._checkpoint.positions.items() if k not in retired}
                watermark = max([_mtime(self._checkpoint.get(p) or "") for p in retired if p != WATERMARK]
                                + [_mtime(self._checkpoint.get(WATERMARK) or "0")])
                positions[WATERMARK] = str(watermark)
                self._checkpoint = Checkpoint(positions)
                # The watermark moves in an envelope of its own (no rows), right before the file.
                yield Envelope(pa.table({}), WATERMARK, str(watermark),
                               retired=tuple(p for p in retired if p != WATERMARK))
            for rows, position in self._chunks(source_file, max_rows):
                taken += rows.num_rows
                self._checkpoint = Checkpoint({**self._checkpoint.positions, source_file.relative: position})
                if position == source_file.version:
                    self._health.set(Health(State.UP, pending=len(todo) - index - 1))
                yield Envelope(rows, source_file.relative, position, source_time_us=source_file.mtime_ns // 1000,
                               version=source_file.version)

    def _chunks(self, source_file: SourceFile, max_rows: int) -> Iterator[tuple[pa.Table, str]]:
        """A file's rows with the position after each part: the whole file at once, except a
        Parquet file of several row groups larger than ``max_rows``, read a few row groups at a
        time (positions ``VERSION@N``: row groups before N taken) so memory stays bounded."""
        if self._format(source_file) != "parquet" or source_file.size == 0:
            yield self._read(source_file), source_file.version
            return
        import pyarrow.parquet as pq

        try:
            handle = self._fs.open_input_file(source_file.full)
        except FileNotFoundError:
            raise SourceUnavailable(f"{source_file.relative} disappeared while being read") from None
        except (OSError, pa.ArrowException) as exc:
            raise self._unreadable(source_file, exc) from None
        with handle:
            try:
                parquet = pq.ParquetFile(handle)
            except (OSError, pa.ArrowException) as exc:
                raise self._unreadable(source_file, exc) from None
            groups = parquet.metadata.num_row_groups
            if groups <= 1 or parquet.metadata.num_rows <= max_rows:
                yield self._read(source_file), source_file.version
                return
            seen = self._checkpoint.get(source_file.relative) or ""
            start = int(seen.rpartition("@")[2]) if seen.startswith(source_file.version + "@") else 0
            while start < groups:
                end, rows = start, 0
                while end < groups and (end == start or rows + parquet.metadata.row_group(end).num_rows <= max_rows):
                    rows += parquet.metadata.row_group(end).num_rows
                    end += 1
                try:
                    table = parquet.read_row_groups(list(range(start, end)))
                except (OSError, pa.ArrowException) as exc:
                    raise self._unreadable(source_file, exc) from None
                yield table, source_file.version if end == groups else f"{source_file.version}@{end}"
                start = end

    def _retire(self, taking: SourceFile, later_mtime_ns: int | None) -> set[str]:
        """The named files to fold into the watermark so that at most ``max_tracked`` stay named:
        the oldest, and only ones strictly older than every file not taken yet."""
        named = [(p, _mtime(v)) for p, v in self._checkpoint.positions.items() if p != WATERMARK and "@" not in v]
        if len(named) + 1 <= self.max_tracked:
            return set()
        bound = min(taking.mtime_ns, later_mtime_ns if later_mtime_ns is not None else taking.mtime_ns)
        named.sort(key=lambda item: item[1])
        excess = len(named) + 1 - self.max_tracked // 2  # fold in batches: not at every file
        return {p for p, mtime in named[:excess] if mtime < bound}

    def health(self) -> Health:
        return self._health.get()

    # -- listing and reading -------------------------------------------------------------

    def _wanted(self, source_file: SourceFile) -> bool:
        if self._backfill is not None and self._backfill.start is not None:
            if not fnmatch.fnmatchcase(source_file.relative, self._backfill.start):
                return False
        seen = self._checkpoint.get(source_file.relative)
        if seen is not None and seen.startswith(source_file.version + "@"):
            return True  # partly taken (some of its row groups): the rest is still to come
        if seen is None:
            watermark = self._checkpoint.get(WATERMARK)
            return watermark is None or source_file.mtime_ns > int(watermark) or self._backfill is not None
        return seen != source_file.version and self.rewritten == "new-version"

    def _list(self) -> list[SourceFile]:
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._root, recursive=True, allow_not_found=False))
        except (OSError, pa.ArrowException) as exc:
            self._health.set(Health(State.DOWN, f"cannot list the source folder: {_reason(exc)}"))
            raise SourceUnavailable(f"cannot list the source folder: {_reason(exc)}") from None
        files: list[SourceFile] = []
        folders_done: set[str] = set()
        candidates = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            relative = posixpath.relpath(info.path, self._root) if self._root else info.path
            base = posixpath.basename(relative)
            if self.marker and base == self.marker:
                folders_done.add(posixpath.dirname(relative))
                continue
            if base.startswith((".", "_")) or not fnmatch.fnmatchcase(relative, self.pattern):
                continue
            if not self.format and posixpath.splitext(base)[1].lower() not in FORMATS:
                continue
            candidates.append((relative, info))
        for relative, info in candidates:
            if self.marker and posixpath.dirname(relative) not in folders_done:
                continue
            mtime_ns = info.mtime_ns if info.mtime_ns is not None else 0
            files.append(SourceFile(relative, info.path, int(info.size or 0), int(mtime_ns)))
        # Oldest first, so that lag is the age of the oldest file not yet ingested.
        files.sort(key=lambda f: (f.mtime_ns, f.relative))
        return files

    def _format(self, source_file: SourceFile) -> str:
        return self.format or FORMATS[posixpath.splitext(source_file.relative)[1].lower()]

    def _unreadable(self, source_file: SourceFile, exc: BaseException) -> SourceDataError:
        message = f"cannot read {source_file.relative} as {self._format(source_file)}: {_reason(exc)}"
        self._health.set(Health(State.FAILED, message))
        return SourceDataError(message)

    def _read(self, source_file: SourceFile) -> pa.Table:
        fmt = self._format(source_file)
        if source_file.size == 0:
            return pa.table({})
        try:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.read_table(source_file.full, filesystem=self._fs)
            with self._fs.open_input_stream(source_file.full) as stream:
                if fmt == "csv":
                    import pyarrow.csv as pacsv

                    return pacsv.read_csv(stream)
                import pyarrow.json as pajson

                return pajson.read_json(stream)
        except FileNotFoundError:
            # Removed between listing and reading: the next listing decides.
            raise SourceUnavailable(f"{source_file.relative} disappeared while being read") from None
        except (OSError, pa.ArrowException) as exc:
            raise self._unreadable(source_file, exc) from None


def _mtime(version: str) -> int:
    """The mtime (ns) in a ``SIZE:MTIME_NS`` version (0 if unreadable)."""
    try:
        return int(version.rpartition(":")[2].partition("@")[0])
    except ValueError:
        return 0


def _text(options: Mapping[str, Any], name: str, default: str) -> str:
    value = options.get(name, default)
    if not isinstance(value, str):
        raise InvalidOptions(f"{name} must be a string")
    return value


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


def _filesystem(path: str, options: Mapping[str, Any]) -> tuple[pafs.FileSystem, str]:
    if path.startswith("s3://"):
        endpoint = options.get("s3_endpoint") or os.environ.get("ICEFLOE_S3_ENDPOINT")
        region = options.get("s3_region") or os.environ.get("ICEFLOE_S3_REGION") or "us-east-1"
        kwargs: dict[str, Any] = {"region": region}
        if endpoint:
            scheme, _, host = str(endpoint).partition("://")
            kwargs.update(endpoint_override=host or scheme, scheme=scheme if host else "https",
                          force_virtual_addressing=False)
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            kwargs.update(access_key=os.environ["AWS_ACCESS_KEY_ID"],
                          secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", ""))
        return pafs.S3FileSystem(**kwargs), path[len("s3://"):].rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(path)
