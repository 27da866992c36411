"""Real sources for the ingest tests: a folder of files, and a paged JSON API served by a real
HTTP server in a thread (http.server) with cursor-field or Link-header paging.

Every source offers the same operations, so the conformance suite runs each case on each:
``add`` rows, ``down`` / ``up``, ``stall`` (a cursor that stops advancing), and ``rows`` (what
the source holds, to compare with the target row for row).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq


class FilesSource:
    kind = "files"
    stall_state = "up"  # nothing new: the connector is simply caught up

    def __init__(self, root: Path) -> None:
        self.root = root / "source"
        self.root.mkdir(parents=True)
        self._rows: list[dict[str, Any]] = []
        self._count = 0

    def options(self) -> dict[str, Any]:
        return {"path": str(self.root)}

    def add(self, rows: list[dict[str, Any]]) -> None:
        """One new file per call, cycling through Parquet, CSV and JSON lines."""
        fmt = ("parquet", "csv", "jsonl")[self._count % 3]
        self._count += 1
        folder = self.root / f"part-{self._count % 4}"
        folder.mkdir(exist_ok=True)
        path = folder / f"f{self._count:05d}.{fmt}"
        tmp = folder / f".tmp-{self._count}"
        table = pa.Table.from_pylist(rows)
        if fmt == "parquet":
            pq.write_table(table, tmp)
        elif fmt == "csv":
            pacsv.write_csv(table, tmp)
        else:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, path)  # whole files only appear (as any well-behaved writer does)
        self._rows.extend(rows)

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows)

    def down(self) -> None:
        self.root.rename(self.root.with_name("source-away"))

    def up(self) -> None:
        self.root.with_name("source-away").rename(self.root)

    def stall(self) -> None:
        """Rewrite every file with the same bytes and the same mtime: the same versions, so
        the connector's cursor does not move and nothing may be taken again."""
        for path in self.root.rglob("f*"):
            stat = path.stat()
            data = path.read_bytes()
            path.write_bytes(data)
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class _Api:
    """The API's state, shared with the handler threads."""

    def __init__(self, paging: str, page_size: int) -> None:
        self.paging = paging
        self.page_size = page_size
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stalled = False
        self.requests = 0
        self.fail_next: list[int] = []  # statuses to answer before serving again (429, 503)


def _handler(api: _Api) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            parts = urllib.parse.urlsplit(self.path)
            if parts.path != "/items":
                self.send_error(404)
                return
            with api.lock:
                api.requests += 1
                if api.fail_next:
                    status = api.fail_next.pop(0)
                    self.send_response(status)
                    if status == 429:
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    return
                query = dict(urllib.parse.parse_qsl(parts.query))
                start = int(query.get("cursor", "0"))
                page = api.records[start:start + api.page_size]
                end = start + len(page)
                if api.stalled:
                    following: int | None = start  # the API names this very page again
                else:
                    following = end if end < len(api.records) else None
            link = None
            if api.paging == "cursor":
                body: Any = {"data": page, "next": str(following) if following is not None else None}
            else:
                body = page
                if following is not None:
                    link = f'</items?cursor={following}>; rel="next"'
            raw = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            if link:
                self.send_header("Link", link)
            self.end_headers()
            self.wfile.write(raw)

    return Handler


class HttpSource:
    """A real HTTP server on a loopback port, serving records in pages."""

    stall_state = "stalled"

    def __init__(self, paging: str, page_size: int = 3) -> None:
        self.kind = f"http-{paging}"
        self.api = _Api(paging, page_size)
        self._server: ThreadingHTTPServer | None = None
        self.port = 0
        self.up()

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"url": f"http://127.0.0.1:{self.port}/items", "rate": 200, "retries": 2}
        if self.api.paging == "cursor":
            options.update(records="data", cursor_field="next")
        return options

    def add(self, rows: list[dict[str, Any]]) -> None:
        with self.api.lock:
            self.api.records.extend(rows)

    def rows(self) -> list[dict[str, Any]]:
        with self.api.lock:
            return list(self.api.records)

    def down(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def up(self) -> None:
        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self.api))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stall(self) -> None:
        with self.api.lock:
            self.api.stalled = True

    def close(self) -> None:
        if self._server is not None:
            self.down()


class PostgresSource:
    """A table of the test run's real PostgreSQL cluster, published, with its own slot; the
    connector reads its snapshot, then its changes."""

    kind = "postgres"
    stall_state = "up"  # nothing new at the source: the connector is simply caught up

    def __init__(self, server: Any) -> None:
        self.server = server
        self.table, self.publication, self.slot = server.names()
        server.execute(f"CREATE TABLE {self.table} (id BIGINT PRIMARY KEY, name TEXT)",
                       f"CREATE PUBLICATION {self.publication} FOR TABLE {self.table}")
        self.columns = ["id", "name"]

    def options(self) -> dict[str, Any]:
        return {"dsn": self.server.dsn, "table": f"public.{self.table}", "publication": self.publication,
                "slot": self.slot}

    def add(self, rows: list[dict[str, Any]]) -> None:
        """One source transaction per call (a new key in the rows: a column added first)."""
        statements = []
        for column in rows[0]:
            if column not in self.columns:
                statements.append(f"ALTER TABLE {self.table} ADD COLUMN {column} TEXT")
                self.columns.append(column)
        with self.server.connect() as conn, conn.transaction():
            for statement in statements:
                conn.execute(statement)
            for row in rows:
                names = list(row)
                conn.execute(f"INSERT INTO {self.table} ({', '.join(names)}) VALUES "
                             f"({', '.join(['%s'] * len(names))})", [row[n] for n in names])

    def rows(self) -> list[dict[str, Any]]:
        return [{"id": r[0], "name": r[1]} for r in
                self.server.execute(f"SELECT id, name FROM {self.table} ORDER BY id")]

    def down(self) -> None:
        self.server.stop()

    def up(self) -> None:
        self.server.start()

    def stall(self) -> None:
        """Nothing new for this table (another table changes): the position may not move."""
        self.server.execute("CREATE TABLE IF NOT EXISTS unrelated (x INT)", "INSERT INTO unrelated VALUES (1)")

    def close(self) -> None:
        try:
            self.server.drop_slot(self.slot)
            self.server.execute(f"DROP PUBLICATION IF EXISTS {self.publication}", f"DROP TABLE IF EXISTS {self.table}")
        except Exception:  # noqa: S110 - the cluster may be down after a failed case
            pass
