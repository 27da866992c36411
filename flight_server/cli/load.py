"""``icefloe load FILE ns.t``: stream a Parquet or CSV file into a table.

The file is read in batches and streamed as one DoPut, so memory stays bounded whatever its
size; the server writes it through the ordinary append path (one commit, all or nothing).
The table must exist, unless ``--create`` is given: then a missing table (and namespace) is
created from the file's columns through Flight SQL bulk ingest, which commits through the same
path. For an existing table, CSV columns are read as the table's types.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.flight as flight

from flight_server.cli.connect import Connection, clean_error
from flight_server.flightsql import protocol as p
from flight_server.security.headers import IDEMPOTENCY_HEADER, SCHEMA_POLICY_HEADER

FORMATS = {".parquet": "parquet", ".parq": "parquet", ".pq": "parquet", ".csv": "csv"}
CSV_BLOCK_BYTES = 1 << 20


@dataclass
class Source:
    """A file opened for streaming: its Arrow schema, its batches and how far along they are."""

    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]
    total: int  # rows (Parquet) or bytes (CSV)
    unit: str
    position: Callable[[int], int]  # rows sent so far -> progress in ``unit``
    close: Callable[[], None]


def file_format(path: str, given: str | None) -> str:
    if given:
        return given
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise click.UsageError(f"cannot tell the format of {path} from its name; pass --format parquet or --format csv")
    return fmt


def open_source(path: str, fmt: str, batch_rows: int, delimiter: str, types: pa.Schema | None) -> Source:
    """Open ``path`` for streaming (``types``: the table's schema, for CSV conversion)."""
    try:
        if fmt == "parquet":
            return _parquet(path, batch_rows)
        return _csv(path, delimiter, types)
    except (pa.ArrowException, OSError) as exc:
        reason = csv_error(path, delimiter, clean_error(exc)) if fmt == "csv" else clean_error(exc)
        raise click.ClickException(f"cannot read {path} as {fmt.upper()}: {reason}; nothing was committed") from None


_CONVERSION = re.compile(r"In CSV column #(\d+): (CSV conversion error to .+?: invalid value '(.*)')$", re.S)
_FIELD_COUNT = re.compile(r"CSV parse error: (Expected (\d+) columns, got \d+)")


def csv_error(path: str, delimiter: str, message: str) -> str:
    """Arrow's CSV error told as a user finds it in the file: the line number and the column's
    name. (Arrow names a column by its 0-based index and knows no line numbers; a conversion
    error says which value failed, so the first record holding it there is the culprit: an
    equal value in an earlier record would have failed the same way.) The file is re-read with
    Python's csv module, which counts lines across quoted newlines; only on this error path."""
    conversion = _CONVERSION.search(message)
    count = _FIELD_COUNT.search(message)
    if conversion is None and count is None:
        return message
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as handle:
            records = csv.reader(handle, delimiter=delimiter)
            header = next(records, [])
            start = records.line_num + 1
            for record in records:
                if not record:  # Arrow skips empty lines too
                    start = records.line_num + 1
                    continue
                if conversion is not None:
                    index, value = int(conversion.group(1)), conversion.group(3)
                    if index < len(record) and record[index] == value:
                        name = header[index] if index < len(header) else f"#{index + 1}"
                        return f"line {start}, column {name!r}: {conversion.group(2)}"
                elif count is not None and len(record) != int(count.group(2)):
                    return f"line {start}: {count.group(1)}"
                start = records.line_num + 1
    except (OSError, csv.Error):
        pass
    return message


def _parquet(path: str, batch_rows: int) -> Source:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    return Source(pf.schema_arrow, _row_group_batches(pf, batch_rows), pf.metadata.num_rows, "rows",
                  lambda rows: rows, pf.close)


def _row_group_batches(pf: Any, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The file's batches, one ``iter_batches`` call per row group. One call over the whole
    file keeps, until it ends, every column chunk its read-ahead (``pre_buffer``) fetched: the
    client grew by the file's compressed size (2.5 GB loading TPC-H SF10's lineitem). Per row
    group, a group's chunks are freed when the next group starts, and each is still fetched
    ahead in one read."""
    for group in range(pf.metadata.num_row_groups):
        yield from pf.iter_batches(batch_size=batch_rows, row_groups=[group])


def _csv_types(path: str, delimiter: str, types: pa.Schema) -> dict[str, pa.DataType]:
    """The table's types for the file's header names: the server matches a header that
    differs from a column only in case to that column, so it must be read as that column's
    type too (else an ``ID`` of small numbers is read as int64 and refused for an INTEGER)."""
    wanted = {f.name: f.type for f in types}
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as handle:
            header = next(csv.reader(handle, delimiter=delimiter), [])
    except (OSError, csv.Error):
        return wanted
    folded: dict[str, list[str]] = {}
    for name in wanted:
        folded.setdefault(name.casefold(), []).append(name)
    for name in header:
        if name not in wanted and len(folded.get(name.casefold(), [])) == 1:
            wanted[name] = wanted[folded[name.casefold()][0]]
    return wanted


def _csv(path: str, delimiter: str, types: pa.Schema | None) -> Source:
    import pyarrow.csv as pacsv

    # A native file, not Python's: Arrow's read-ahead thread reads it without the GIL. With a
    # Python file, a load that failed in the first block could end in "terminate called
    # without an active exception" (exit 134): at exit the interpreter was finalizing while
    # that thread still waited to call into Python.
    handle = pa.OSFile(path, "rb")
    column_types = _csv_types(path, delimiter, types) if types is not None else None
    try:
        reader = pacsv.open_csv(
            handle,
            read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(column_types=column_types),
        )
    except BaseException:
        handle.close()
        raise
    size = Path(path).stat().st_size

    def batches() -> Iterator[pa.RecordBatch]:
        while True:
            try:
                yield reader.read_next_batch()
            except StopIteration:
                return

    return Source(reader.schema, batches(), size, "bytes", lambda _rows: handle.tell(), handle.close)


class Progress:
    """One status line on stderr, redrawn at most ten times a second (only when enabled)."""

    def __init__(self, label: str, total: int, unit: str, enabled: bool) -> None:
        self.label, self.total, self.unit, self.enabled = label, total, unit, enabled
        self._shown = 0.0

    def update(self, done: int, rows: int, final: bool = False) -> None:
        if not self.enabled or (not final and time.monotonic() - self._shown < 0.1):
            return
        self._shown = time.monotonic()
        share = f" ({100 * done // self.total}%)" if self.total else ""
        amount = f"{done:,} / {self.total:,} {self.unit}" if self.unit == "rows" else f"{rows:,} rows"
        if self.unit == "bytes" and self.total:
            amount += f", {done:,} / {self.total:,} bytes"
        sys.stderr.write(f"\r{self.label}: {amount}{share}")
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


def split_table_name(name: str) -> tuple[str, ...]:
    parts = tuple(name.split("."))
    if len(parts) < 2 or any(not part.strip() for part in parts):
        raise click.UsageError(f"TABLE must be a qualified name such as sales.orders, not {name!r}")
    return parts


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_schema(conn: Connection, client: flight.FlightClient, identifier: tuple[str, ...]) -> pa.Schema | None:
    """The table's Arrow schema, or None if it does not exist."""
    sql = f"SELECT * FROM {_quote('.'.join(identifier[:-1]))}.{_quote(identifier[-1])} LIMIT 0"
    descriptor = flight.FlightDescriptor.for_command(p.CommandStatementQuery(sql).pack())
    try:
        schema: pa.Schema = client.get_flight_info(descriptor, conn.options()).schema
        return schema
    except pa.ArrowKeyError:  # NOT_FOUND
        return None
    except (flight.FlightError, pa.ArrowException) as exc:
        if "does not exist" in str(exc):
            return None
        raise click.ClickException(clean_error(exc, conn.uri)) from None


def run_load(conn: Connection, path: str, table: str, fmt: str | None, create: bool, batch_rows: int,
             delimiter: str, progress: bool | None, idempotency_key: str | None,
             evolve: bool = False) -> dict[str, Any]:
    """Stream the file into the table; return the server's answer (printed as one JSON line)."""
    identifier = split_table_name(table)
    fmt = file_format(path, fmt)
    client = conn.client()
    try:
        existing = table_schema(conn, client, identifier)
        if existing is None and not create:
            raise click.ClickException(
                f"table {table} does not exist; create it first (icefloe sql \"CREATE TABLE {table} (...)\") "
                "or pass --create to create it from the file's columns"
            )
        source = open_source(path, fmt, batch_rows, delimiter, existing if fmt == "csv" else None)
        try:
            show = sys.stderr.isatty() if progress is None else progress
            meter = Progress(f"loading {Path(path).name} into {table}", source.total, source.unit, show)
            headers = list(conn.headers())
            if idempotency_key:
                headers.append((IDEMPOTENCY_HEADER.encode(), idempotency_key.encode()))
            if evolve:
                headers.append((SCHEMA_POLICY_HEADER.encode(), b"evolve"))
            options = flight.FlightCallOptions(headers=headers)
            if existing is not None:
                descriptor = flight.FlightDescriptor.for_path(*identifier)
            else:
                descriptor = flight.FlightDescriptor.for_command(p.CommandStatementIngest(
                    table_definition_options=p.TableDefinitionOptions(if_not_exist=1, if_exists=2),  # create or append
                    table=identifier[-1],
                    schema=".".join(identifier[:-1]),
                ).pack())
            answer = _stream(client, descriptor, options, source, meter, path, delimiter)
        finally:
            source.close()
    finally:
        client.close()
    if existing is None:
        return {"table": table, "rows": p.DoPutUpdateResult.decode(answer).record_count, "created": True}
    result: dict[str, Any] = json.loads(answer)
    return result


class _FileError(Exception):
    """The file could not be read (the message says why)."""


def _read(batches: Iterator[pa.RecordBatch], path: str, delimiter: str) -> Iterator[pa.RecordBatch]:
    try:
        yield from batches
    except (pa.ArrowException, OSError) as exc:
        raise _FileError(csv_error(path, delimiter, clean_error(exc))) from None


def _abandon(message: str, code: int) -> None:
    """Leave without ending the DoPut: the server sees a client that went away and commits
    nothing. (pyarrow's client cannot cancel a DoPut, and closing its writer, even after an
    error, ends the stream normally: the rows sent so far would be committed.)"""
    sys.stdout.flush()
    sys.stderr.write(f"\nError: {message}\n")
    sys.stderr.flush()
    os._exit(code)


def _stream(client: flight.FlightClient, descriptor: flight.FlightDescriptor, options: flight.FlightCallOptions,
            source: Source, meter: Progress, path: str, delimiter: str) -> bytes:
    rows = 0
    try:
        writer, reader = client.do_put(descriptor, source.schema, options)
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        raise click.ClickException(clean_error(exc)) from None
    try:
        for batch in _read(source.batches, path, delimiter):
            writer.write_batch(batch)
            rows += batch.num_rows
            meter.update(source.position(rows), rows)
        meter.update(source.total if source.unit == "bytes" else rows, rows, final=True)
        writer.done_writing()
        buf = reader.read()
        writer.close()
    except _FileError as exc:
        _abandon(f"cannot read {path}: {exc}; nothing was committed", 1)
        raise  # not reached
    except KeyboardInterrupt:
        _abandon("interrupted; nothing was committed", 130)
        raise
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        # The server refused the stream; its status arrives on close (the write only broke off).
        message = clean_error(exc)
        try:
            writer.close()
        except (flight.FlightError, pa.ArrowException, OSError) as status:
            message = clean_error(status)
        raise click.ClickException(f"{message}; nothing was committed") from None
    if buf is None:
        raise click.ClickException("the server sent no result; the load may not have committed")
    return bytes(buf.to_pybytes())
