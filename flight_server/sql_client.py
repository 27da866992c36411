"""``icefloe sql "..."``: run one SQL statement over Flight SQL and print the result.

A plain pyarrow.flight client speaking the same Flight SQL messages as any other client
(CommandStatementQuery for queries, CommandStatementUpdate for updates).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.flight as flight

from flight_server.flightsql import protocol as p


def run_query(location: str, sql: str, headers: list[tuple[bytes, bytes]] | None = None) -> pa.Table:
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(headers=headers or [])
        info = client.get_flight_info(flight.FlightDescriptor.for_command(p.CommandStatementQuery(sql).pack()), options)
        tables = [client.do_get(endpoint.ticket, options).read_all() for endpoint in info.endpoints]
        return pa.concat_tables(tables) if tables else info.schema.empty_table()
    finally:
        client.close()


def run_update(location: str, sql: str, headers: list[tuple[bytes, bytes]] | None = None) -> int:
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(headers=headers or [])
        descriptor = flight.FlightDescriptor.for_command(p.CommandStatementUpdate(sql).pack())
        writer, meta = client.do_put(descriptor, pa.schema([]), options)
        writer.done_writing()
        buf = meta.read()
        writer.close()
        return p.DoPutUpdateResult.decode(buf.to_pybytes()).record_count if buf is not None else -1
    finally:
        client.close()


def _cell(value: Any) -> str:
    return "NULL" if value is None else str(value)


def print_table(table: pa.Table, fmt: str = "table", out: TextIO = sys.stdout) -> None:
    rows = table.to_pylist()
    if fmt == "json":
        for row in rows:
            out.write(json.dumps(row, default=str) + "\n")
        return
    if fmt == "csv":
        import pyarrow.csv as pacsv

        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink)
        out.write(sink.getvalue().to_pybytes().decode())
        return
    names = table.schema.names
    cells = [[_cell(row[n]) for n in names] for row in rows]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    out.write(" | ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)) + "\n")
    out.write("-+-".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + "\n")
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")
