"""``icefloe ingest``: add, list, run, pause, resume, remove, status and backfill connectors
of a running server (DoAction ``icefloe.ingest.*``); each prints the server's JSON answer."""

from __future__ import annotations

import json
from typing import Any

import click
import pyarrow as pa
import pyarrow.flight as flight

from flight_server.cli.connect import Connection, clean_error, server_options

# CLI flag -> option name, per source (``--option KEY=VALUE`` covers everything else).
FILES_FLAGS = ("path", "pattern", "format", "marker", "rewritten")
HTTP_FLAGS = ("url", "records", "cursor_field", "cursor_param", "rate", "retries", "timeout")
POSTGRES_FLAGS = ("dsn", "pg_table", "publication", "slot")
FLAGS = {"files": FILES_FLAGS, "http": HTTP_FLAGS, "postgres": POSTGRES_FLAGS}
OPTION_NAMES = {"pg_table": "table"}  # flags whose option is named otherwise


def call(conn: Connection, action: str, body: dict[str, Any]) -> None:
    client = conn.client()
    try:
        for result in client.do_action(flight.Action(action, json.dumps(body).encode("utf-8")), conn.options()):
            click.echo(result.body.to_pybytes().decode("utf-8"))
    except (flight.FlightError, pa.ArrowException) as exc:
        raise click.ClickException(clean_error(exc, conn.uri)) from None
    finally:
        client.close()


@click.group()
def ingest() -> None:
    """Pull data from sources (folders of files, HTTP APIs, Postgres CDC) into tables, exactly once."""


@ingest.command()
@click.argument("name")
@click.option("--table", default=None, help="Target table ns.t (it must exist); postgres with --pg-table "
              "SOURCE=TARGET: not needed.")
@click.option("--source", required=True, type=click.Choice(["files", "http", "postgres"]),
              help="The source kind.")
@click.option("--path", default=None, help="files: the folder (or s3://bucket/prefix).")
@click.option("--pattern", default=None, help="files: a glob over paths relative to --path (default *).")
@click.option("--format", "format_", default=None, type=click.Choice(["parquet", "csv", "jsonl"]),
              help="files: the format (default: from each file's extension).")
@click.option("--marker", default=None, help="files: only take a folder's files once it holds this file.")
@click.option("--rewritten", default=None, type=click.Choice(["new-version", "ignore"]),
              help="files: what a file rewritten in place is (default new-version: ingested again).")
@click.option("--url", default=None, help="http: the first page.")
@click.option("--records", default=None, help="http: dotted path to the records in a page (default: the body).")
@click.option("--cursor-field", default=None, help="http: dotted path to the next cursor (default: Link headers).")
@click.option("--cursor-param", default=None, help="http: query parameter carrying the cursor (default cursor).")
@click.option("--rate", default=None, type=float, help="http: at most this many requests per second (default 10).")
@click.option("--retries", default=None, type=int, help="http: attempts per request (default 5).")
@click.option("--timeout", default=None, type=float, help="http: seconds per request (default 30).")
@click.option("--dsn", default=None, envvar="ICEFLOE_POSTGRES_DSN",
              help="postgres: libpq connection string or URI (or $ICEFLOE_POSTGRES_DSN, kept off the command line).")
@click.option("--pg-table", default=None, multiple=True,
              help="postgres: the source table, schema.name (default schema public); repeat as SOURCE=TARGET "
                   "(public.orders=sales.orders) to replicate several tables through one slot, each source "
                   "transaction in one commit.")
@click.option("--publication", default=None, help="postgres: the publication that publishes the table.")
@click.option("--slot", default=None, help="postgres: the logical replication slot (created when missing).")
@click.option("--option", "extra", multiple=True, help="Any source option as KEY=VALUE (repeatable).")
@click.option("--schema-policy", default=None, type=click.Choice(["match", "evolve", "strict"]),
              help="This connector's schema policy (default: the table's).")
@click.option("--max-rows", default=None, type=click.IntRange(min=1), help="Rows per commit (default 1000000).")
@click.option("--poll-s", default=None, type=float, help="Seconds between passes when idle (default 1).")
@click.option("--paused", is_flag=True, default=False, help="Add it paused (start it with `run`).")
@server_options()
def add(name: str, table: str | None, source: str, conn: Connection, extra: tuple[str, ...], schema_policy: str | None,
        max_rows: int | None, poll_s: float | None, paused: bool, **flags: Any) -> None:
    """Add connector NAME feeding TABLE; it starts running in the server (role admin)."""
    options: dict[str, Any] = {}
    allowed = FLAGS[source]
    pg_tables = flags.pop("pg_table", ())
    if pg_tables:
        if source != "postgres":
            raise click.UsageError(f"--pg-table is not an option of --source {source}")
        mapped = [item.partition("=") for item in pg_tables]
        if all(sep for _, sep, _ in mapped):
            options["tables"] = {src.strip(): dst.strip() for src, _, dst in mapped}
        elif len(pg_tables) == 1:
            options["table"] = pg_tables[0]
        else:
            raise click.BadParameter("give one source table, or SOURCE=TARGET for each of several",
                                     param_hint="--pg-table")
    if table is None and "tables" not in options:
        raise click.UsageError("Missing option '--table'.")
    for flag, value in flags.items():
        key = flag.rstrip("_")
        if value is None:
            continue
        if key not in allowed:
            if key == "dsn":  # from the environment, meant for another connector
                continue
            raise click.UsageError(f"--{key.replace('_', '-')} is not an option of --source {source}")
        options[OPTION_NAMES.get(key, key)] = value
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter("must be KEY=VALUE", param_hint="--option")
        options[key] = value
    body: dict[str, Any] = {"name": name, "source": source, "options": options}
    if table is not None:
        body["table"] = table
    if schema_policy:
        body["schema_policy"] = schema_policy
    if max_rows is not None:
        body["max_rows"] = max_rows
    if poll_s is not None:
        body["poll_s"] = poll_s
    if paused:
        body["paused"] = True
    call(conn, "icefloe.ingest.add", body)


@ingest.command("list")
@server_options()
def list_(conn: Connection) -> None:
    """List the server's connectors (one JSON array)."""
    call(conn, "icefloe.ingest.list", {})


@ingest.command()
@click.argument("name", required=False)
@server_options()
def status(name: str | None, conn: Connection) -> None:
    """Status of NAME (or of all): checkpoint, rows, commits, lag, state."""
    call(conn, "icefloe.ingest.status", {"name": name} if name else {})


@ingest.command()
@click.argument("name")
@click.option("--once", is_flag=True, default=False, help="Run one pass now and print what it did.")
@server_options()
def run(name: str, once: bool, conn: Connection) -> None:
    """Run NAME: in the background (resumes a paused one), or --once now."""
    call(conn, "icefloe.ingest.run", {"name": name, "once": once})


@ingest.command()
@click.argument("name")
@server_options()
def pause(name: str, conn: Connection) -> None:
    """Pause NAME (durably: it stays paused across restarts)."""
    call(conn, "icefloe.ingest.pause", {"name": name})


@ingest.command()
@click.argument("name")
@server_options()
def resume(name: str, conn: Connection) -> None:
    """Resume a paused NAME."""
    call(conn, "icefloe.ingest.resume", {"name": name})


@ingest.command()
@click.argument("name")
@server_options()
def remove(name: str, conn: Connection) -> None:
    """Remove NAME (role admin); its checkpoint stays in the table, so adding it again resumes."""
    call(conn, "icefloe.ingest.remove", {"name": name})


@ingest.command()
@click.argument("name")
@click.option("--start", default=None, help="Range start (files: a glob; http: a page URL).")
@click.option("--end", default=None, help="Range end (http: the page URL to stop at, exclusive).")
@server_options()
def backfill(name: str, start: str | None, end: str | None, conn: Connection) -> None:
    """Ingest a bounded range of NAME's source again, without moving its live checkpoint.

    The same range run again takes only what changed since (idempotent)."""
    call(conn, "icefloe.ingest.backfill", {"name": name, "start": start, "end": end})
