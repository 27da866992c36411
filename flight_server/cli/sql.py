"""``icefloe sql``: run SQL over Flight SQL and print the results.

Statements come from the command line, from a file (``-f FILE``, ``-f -`` for stdin), from
stdin when it is not a terminal, or from an interactive prompt with history (readline) when it
is. A plain pyarrow.flight client speaking the same Flight SQL messages as any other client:
``CommandStatementQuery`` for every statement (a write sent that way answers one ``count``
row), ``CommandStatementUpdate`` with ``--update``. One connection serves every statement.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.flight as flight

from flight_server.cli.connect import Connection, clean_error
from flight_server.flightsql import protocol as p

HISTORY_LENGTH = 1000


class SqlSession:
    """One Flight client for a series of statements."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client()

    def query(self, sql: str) -> pa.Table:
        options = self.conn.options()
        info = self.client.get_flight_info(flight.FlightDescriptor.for_command(p.CommandStatementQuery(sql).pack()),
                                           options)
        tables = [self.client.do_get(endpoint.ticket, options).read_all() for endpoint in info.endpoints]
        return pa.concat_tables(tables) if tables else info.schema.empty_table()

    def update(self, sql: str) -> int:
        descriptor = flight.FlightDescriptor.for_command(p.CommandStatementUpdate(sql).pack())
        writer, meta = self.client.do_put(descriptor, pa.schema([]), self.conn.options())
        writer.done_writing()
        buf = meta.read()
        writer.close()
        return p.DoPutUpdateResult.decode(buf.to_pybytes()).record_count if buf is not None else -1

    def close(self) -> None:
        self.client.close()


# -- splitting statements ------------------------------------------------------------------


@dataclass
class Statement:
    text: str
    line: int  # 1-based line of its first character in the input
    start: int = 0  # offset of its first character in the text it was split from


def split_statements(text: str, first_line: int = 1) -> tuple[list[Statement], Statement | None]:
    """The ``;``-terminated statements of ``text`` and the unterminated rest (None if only
    whitespace or comments are left). Semicolons inside quotes ('...', "..."), dollar quotes
    ($tag$...$tag$) and comments (-- and /* */) do not end a statement."""
    statements: list[Statement] = []
    start, line, start_line = 0, first_line, None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            stop = n if end < 0 else end + 2
            line += text.count("\n", i, stop)
            i = stop
            continue
        if ch.isspace():
            i += 1
            continue
        if start_line is None:
            start, start_line = i, line
        if ch in ("'", '"'):
            stop = _quote_end(text, i, ch)
        elif ch == "$" and (tag := _dollar_tag(text, i)) is not None:
            end = text.find(tag, i + len(tag))
            stop = n if end < 0 else end + len(tag)
        elif ch == ";":
            body = text[start:i].strip()
            if body:
                statements.append(Statement(body, start_line, start))
            start_line = None
            i += 1
            continue
        else:
            stop = i + 1
        line += text.count("\n", i, stop)
        i = stop
    rest = text[start:].strip() if start_line is not None else ""
    return statements, (Statement(rest, start_line, start) if rest and start_line is not None else None)


def _quote_end(text: str, i: int, quote: str) -> int:
    """Index after the quoted string starting at ``i`` (a doubled quote stays inside)."""
    j = i + 1
    while True:
        end = text.find(quote, j)
        if end < 0:
            return len(text)
        if text.startswith(quote * 2, end):
            j = end + 2
            continue
        return end + 1


def _dollar_tag(text: str, i: int) -> str | None:
    """``$tag$`` (or ``$$``) starting at ``i``, or None when ``$`` starts something else ($1)."""
    end = text.find("$", i + 1)
    if end < 0:
        return None
    tag = text[i : end + 1]
    inner = tag[1:-1]
    if inner and not (inner.replace("_", "a").isalnum() and not inner[0].isdigit()):
        return None
    return tag


def statements_of(lines: Iterable[str]) -> Iterator[Statement]:
    """Statements as their lines arrive (a pipe runs each statement once it is complete)."""
    buffer: list[str] = []
    first_line = line_no = 1
    for raw in lines:
        if not buffer:
            first_line = line_no
        buffer.append(raw)
        line_no += 1
        if ";" not in raw:
            continue
        text = "".join(buffer)
        done, rest = split_statements(text, first_line)
        yield from done
        if rest is None:
            buffer = []
        else:  # keep the unterminated rest for the next lines
            buffer, first_line = [text[rest.start :]], rest.line
    done, rest = split_statements("".join(buffer), first_line)
    yield from done
    if rest is not None:
        yield rest


# -- running and printing ------------------------------------------------------------------


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


class StatementFailed(Exception):
    """A statement the server refused (the message is for the user)."""


def run_statement(session: SqlSession, sql: str, fmt: str, update: bool, out: TextIO = sys.stdout) -> None:
    try:
        if update:
            out.write(f"{session.update(sql)} rows affected\n")
        else:
            print_table(session.query(sql), fmt, out)
    except (flight.FlightError, pa.ArrowException) as exc:
        raise StatementFailed(clean_error(exc, session.conn.uri)) from None
    out.flush()


def run_script(session: SqlSession, statements: Iterable[Statement], fmt: str, update: bool,
               label: str | None) -> None:
    """Run statements in order; stop at the first that fails (StatementFailed names it)."""
    for count, statement in enumerate(statements):
        if count and fmt == "table":
            sys.stdout.write("\n")
        try:
            run_statement(session, statement.text, fmt, update)
        except StatementFailed as exc:
            where = f"{label}:{statement.line}: " if label else ""
            raise StatementFailed(f"{where}{exc}") from None


def interactive(session: SqlSession, fmt: str, update: bool) -> None:
    """A prompt: statements end with ``;``; history in ``ICEFLOE_HISTORY`` (default
    ``~/.icefloe_history``); ``\\q``, ``quit``, ``exit`` or Ctrl-D leave; Ctrl-C drops the input."""
    history = _open_history()
    sys.stderr.write(f"icefloe sql on {session.conn.uri}; end statements with ';', \\q to quit\n")
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input("icefloe> " if not buffer else "     ...> ")
            except EOFError:
                sys.stdout.write("\n")
                return
            except KeyboardInterrupt:
                sys.stdout.write("\n")
                buffer = []
                continue
            if not buffer and line.strip() in ("\\q", "quit", "exit", "quit;", "exit;"):
                return
            buffer.append(line + "\n")
            done, rest = split_statements("".join(buffer))
            if rest is not None:
                continue
            if done:
                _remember(" ".join(part.strip() for part in buffer if part.strip()))
            buffer = []
            for statement in done:
                try:
                    run_statement(session, statement.text, fmt, update)
                except StatementFailed as exc:
                    sys.stderr.write(f"error: {exc}\n")
                except KeyboardInterrupt:
                    sys.stderr.write("cancelled\n")
    finally:
        if history is not None:
            _save_history(history)


def _history_file() -> str | None:
    path = os.environ.get("ICEFLOE_HISTORY")
    if path == "":
        return None  # ICEFLOE_HISTORY= turns history off
    return path or os.path.join(os.path.expanduser("~"), ".icefloe_history")


def _open_history() -> str | None:
    path = _history_file()
    try:
        import readline
    except ImportError:  # no readline on this platform: a plain prompt
        return None
    readline.set_history_length(HISTORY_LENGTH)
    readline.set_auto_history(False)  # one entry per statement (see _remember), not per line
    if path:
        try:
            readline.read_history_file(path)
        except OSError:
            pass  # first use, or unreadable: start empty
    return path


def _remember(entry: str) -> None:
    try:
        import readline
    except ImportError:
        return
    readline.add_history(entry)


def _save_history(path: str) -> None:
    import readline

    try:
        readline.write_history_file(path)
    except OSError as exc:
        sys.stderr.write(f"icefloe: could not save the history to {path}: {exc.strerror}\n")
