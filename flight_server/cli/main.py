"""The ``icefloe`` command line (click; every ``serve`` flag also reads ``ICEFLOE_*``)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any, TextIO

import click

from flight_server import (
    __version__,
    allocator,  # noqa: F401 - first: sets mimalloc's options before pyarrow loads
)
from flight_server.cli.connect import Connection, server_options
from flight_server.config import Config
from flight_server.observability.logging_config import configure_logging


def _finite_seconds(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise click.BadParameter("must be a finite number of seconds >= 0", param=param)
    return value


def _comma_list(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated values, each possibly a comma-separated list (how the ``ICEFLOE_*`` list reads),
    checked as Host allow-list entries."""
    items = tuple(item.strip() for raw in value for item in raw.split(",") if item.strip())
    if items:
        from flight_server.http.request_checks import AllowedHosts

        try:
            AllowedHosts("127.0.0.1", items)
        except ValueError as exc:
            raise click.BadParameter(str(exc).removeprefix("--http-allowed-host "), param=_param) from None
    return items


def storage_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--catalog-path`` and the ``--s3-*`` flags (an object-store warehouse)."""
    for option in reversed((
        click.option("--catalog-path", envvar="ICEFLOE_CATALOG_PATH", default=None,
                     help="Local folder of the RocksDB catalog (required with an s3:// warehouse)."),
        click.option("--s3-endpoint", envvar="ICEFLOE_S3_ENDPOINT", default=None,
                     help="S3 endpoint URL (http(s)://HOST:PORT) of an S3-compatible store; default: AWS."),
        click.option("--s3-region", envvar="ICEFLOE_S3_REGION", default=None,
                     help="S3 region (default: AWS_REGION, else us-east-1 with --s3-endpoint)."),
        click.option("--s3-path-style", envvar="ICEFLOE_S3_PATH_STYLE", is_flag=True, default=False,
                     help="Path-style S3 requests (http://HOST/BUCKET/KEY) instead of virtual hosts."),
        click.option("--s3-credentials-file", envvar="ICEFLOE_S3_CREDENTIALS_FILE", default=None,
                     help="AWS credentials file (INI, profile AWS_PROFILE or default); default: "
                          "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY."),
    )):
        fn = option(fn)
    return fn


@click.group()
@click.version_option(__version__, prog_name="icefloe")
def main() -> None:
    """icefloe: an Arrow Flight SQL server for an Iceberg lakehouse."""


@main.command()
@click.option("--warehouse", envvar="ICEFLOE_WAREHOUSE", default="./warehouse", show_default=True,
              help="Warehouse folder (or s3:// URI) holding catalog.rocksdb and the tables.")
@storage_options
@click.option("--host", envvar="ICEFLOE_HOST", default="127.0.0.1", show_default=True,
              help="Address to listen on; without --users only loopback (see --allow-remote-without-auth).")
@click.option("--port", envvar="ICEFLOE_PORT", default=31337, show_default=True, type=int,
              help="TCP port; 0 picks a free one (the readiness line names it).")
@click.option("--users", "users_file", envvar="ICEFLOE_USERS", default=None,
              help="TOML users file; with it every call must authenticate.")
@click.option("--tls-cert", envvar="ICEFLOE_TLS_CERT", default=None,
              help="PEM certificate chain of the server: serve grpc+tls:// (needs --tls-key).")
@click.option("--tls-key", envvar="ICEFLOE_TLS_KEY", default=None, help="PEM private key of --tls-cert.")
@click.option("--tls-client-ca", envvar="ICEFLOE_TLS_CLIENT_CA", default=None,
              help="CA bundle for client certificates (mutual TLS).")
@click.option("--allow-remote-without-auth", envvar="ICEFLOE_ALLOW_REMOTE_WITHOUT_AUTH", is_flag=True, default=False,
              help="Without --users, also listen on a non-loopback --host (anyone reachable may read and write).")
@click.option("--token-ttl", "token_ttl_s", envvar="ICEFLOE_TOKEN_TTL", default=8 * 3600.0, show_default=True,
              type=click.FloatRange(min=1), help="Seconds a bearer token issued at login stays valid.")
@click.option("--max-calls-per-user", envvar="ICEFLOE_MAX_CALLS_PER_USER", default=64, show_default=True,
              type=click.IntRange(min=0), help="Concurrent calls per authenticated user (0 = no limit).")
@click.option("--lineage-namespace", envvar="ICEFLOE_LINEAGE_NAMESPACE", default=None,
              help="OpenLineage namespace of datasets and jobs (default icefloe://HOST:PORT).")
@click.option("--lineage-hash-names", envvar="ICEFLOE_LINEAGE_HASH_NAMES", is_flag=True, default=False,
              help="Send hashed dataset and job names (and no SQL text) in lineage events.")
@click.option("--demo", envvar="ICEFLOE_DEMO", is_flag=True, default=False, help="Load a small sample dataset.")
@click.option("--query-timeout", "query_timeout_s", envvar="ICEFLOE_QUERY_TIMEOUT", default=300.0, show_default=True,
              type=float, help="Seconds a SQL query may run before it is interrupted (DEADLINE_EXCEEDED).")
@click.option("--transaction-timeout", "transaction_timeout_s", envvar="ICEFLOE_TRANSACTION_TIMEOUT", default=300.0,
              show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds a Flight SQL transaction may stay idle before it is ended (nothing of it commits).")
@click.option("--max-concurrent-queries", envvar="ICEFLOE_MAX_CONCURRENT_QUERIES", default=16, show_default=True,
              type=int, help="Queries that may run at once; more wait up to 5 s, then get UNAVAILABLE "
                   "(message RESOURCE_EXHAUSTED: ...).")
@click.option("--advertise-uri", "advertise_uris", envvar="ICEFLOE_ADVERTISE_URI", multiple=True,
              help="A URI endpoints name (repeat for a fleet of servers over one warehouse); default: none.")
@click.option("--read-workers", envvar="ICEFLOE_READ_WORKERS", default=0, show_default=True,
              type=click.IntRange(0, 64),
              help="Worker processes that run query results (DoGet) beside the server, so reads use more cores; "
                   "writes, planning and sessions stay in the server.")
@click.option("--memory-limit", envvar="ICEFLOE_MEMORY_LIMIT", default=None,
              help="DuckDB memory per running query (e.g. 2GB); beyond it sorts and joins spill to disk.")
@click.option("--rest-port", envvar="ICEFLOE_REST_PORT", default=None, type=click.IntRange(0, 65535),
              help="Serve the Iceberg REST catalog API on this HTTP port (0 = a free port); default: off.")
@click.option("--metrics-port", envvar="ICEFLOE_METRICS_PORT", default=None, type=click.IntRange(0, 65535),
              help="Serve /metrics, /healthz, /readyz and the watch page on this HTTP port (0 = a free port).")
@click.option("--http-allowed-host", "http_allowed_hosts", envvar="ICEFLOE_HTTP_ALLOWED_HOSTS", multiple=True,
              callback=_comma_list,
              help="Another Host name the HTTP ports answer to (repeatable; env: comma-separated): NAME (any port), "
                   "NAME:PORT, *.DOMAIN, or * (no Host check). Always allowed: --host, localhost on loopback, the "
                   "address a connection arrives at, --advertise-uri names, the machine's name on 0.0.0.0 / ::.")
@click.option("--http-max-connections", envvar="ICEFLOE_HTTP_MAX_CONNECTIONS", default=1024, show_default=True,
              type=click.IntRange(min=1),
              help="HTTP connections held at once, all ports (at most a quarter of the open-file limit).")
@click.option("--http-max-connections-per-ip", envvar="ICEFLOE_HTTP_MAX_CONNECTIONS_PER_IP", default=64,
              show_default=True, type=click.IntRange(min=1), help="HTTP connections held at once per client IP.")
@click.option("--http-header-timeout", "http_header_timeout_s", envvar="ICEFLOE_HTTP_HEADER_TIMEOUT", default=10.0,
              show_default=True, type=click.FloatRange(min=0.05, max=3600),
              help="Seconds a client has to send a request's headers before the connection is closed.")
@click.option("--http-keepalive-timeout", "http_keepalive_timeout_s", envvar="ICEFLOE_HTTP_KEEPALIVE_TIMEOUT",
              default=5.0, show_default=True, type=click.FloatRange(min=0.05, max=3600),
              help="Seconds an idle HTTP keep-alive connection stays open.")
@click.option("--http-max-event-streams", envvar="ICEFLOE_HTTP_MAX_EVENT_STREAMS", default=100, show_default=True,
              type=click.IntRange(min=1), help="Watch-page event streams (/api/events) open at once.")
@click.option("--http-max-event-streams-per-user", envvar="ICEFLOE_HTTP_MAX_EVENT_STREAMS_PER_USER", default=16,
              show_default=True, type=click.IntRange(min=1),
              help="Event streams one user (one client IP without --users) may hold; more get 429.")
@click.option("--ingest-config", envvar="ICEFLOE_INGEST_CONFIG", default=None,
              help="TOML file of ingest connectors ([connectors.NAME]) to run inside the server.")
@click.option("--log-level", envvar="ICEFLOE_LOG_LEVEL", default="info", show_default=True,
              help="debug, info, warning or error.")
@click.option("--log-format", envvar="ICEFLOE_LOG_FORMAT", default="text", show_default=True,
              type=click.Choice(["text", "json"]), help="json: one JSON object per log line.")
@click.option("--slow-query-ms", envvar="ICEFLOE_SLOW_QUERY_MS", default=1000.0, show_default=True,
              type=click.FloatRange(min=0), help="Statements this slow are logged at WARNING in the query log.")
def serve(**options: object) -> None:
    """Serve the warehouse over Arrow Flight SQL."""
    config = Config(**options)  # type: ignore[arg-type]
    configure_logging(config.log_level, config.log_format)
    from catalog.object_store import StorageConfigError
    from flight_server.security.users import SecurityConfigError
    from flight_server.server import StartupError
    from flight_server.server import serve as run

    try:
        run(config)
    except (SecurityConfigError, StorageConfigError, StartupError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command("rotate-key")
@click.option("--warehouse", envvar="ICEFLOE_WAREHOUSE", default="./warehouse", show_default=True,
              help="Folder of the signing key file: the warehouse, or the --catalog-path folder of an s3:// warehouse.")
@click.option("--catalog-path", envvar="ICEFLOE_CATALOG_PATH", default=None,
              help="The catalog folder of an s3:// warehouse (its key file is there).")
@click.option("--keep", default=1, show_default=True, type=click.IntRange(min=0),
              help="Old keys that still verify tokens and handles already given out.")
def rotate_key(warehouse: str, catalog_path: str | None, keep: int) -> None:
    """Make a new signing key for bearer tokens and handles; restart the servers to use it."""
    from flight_server.security.tokens import rotate_key as rotate
    from flight_server.security.users import SecurityConfigError

    try:
        click.echo(f"new signing key in {rotate(warehouse, keep, catalog_path)}; restart the servers of this warehouse")
    except SecurityConfigError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
def passwd() -> None:
    """Read a password on stdin and print its salted Argon2id hash for the --users file."""
    from flight_server.security.users import hash_password, read_password_from_stdin

    try:
        password = read_password_from_stdin()
        click.echo(hash_password(password))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@server_options(login=True)
def login(conn: Connection) -> None:
    """Read a password on stdin, log in, and print a bearer token (for ICEFLOE_TOKEN / --token)."""
    from flight_server.cli.connect import login_token, read_login_password

    assert conn.user is not None  # --user is required here
    try:
        click.echo(login_token(conn.uri, conn.user, read_login_password(conn.user), conn.tls_root_certs))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.argument("query", required=False)
@click.option("-f", "--file", "script", type=click.File("r", encoding="utf-8"), default=None,
              help="Run the statements of this file ('-' for stdin), in order; stop at the first error.")
@server_options()
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="Output format of results.")
@click.option("--update", is_flag=True, default=False, help="Send as updates (CommandStatementUpdate).")
def sql(query: str | None, script: TextIO | None, conn: Connection, fmt: str, update: bool) -> None:
    """Run SQL against an icefloe server and print the results.

    QUERY may hold several statements separated by ';'. Without QUERY, statements are read
    from -f FILE, from stdin when it is not a terminal, or at an interactive prompt (with
    history in ~/.icefloe_history, or ICEFLOE_HISTORY) when it is. With --user and a
    password on stdin, the password is the first line and the statements follow.
    """
    from flight_server.cli.sql import (
        SqlSession,
        StatementFailed,
        interactive,
        run_script,
        split_statements,
        statements_of,
    )

    if query is not None and script is not None:
        raise click.UsageError("give QUERY or -f FILE, not both")
    conn.headers()  # log in first (--user reads the password before any statement)
    session = SqlSession(conn)
    try:
        if query is not None:
            done, rest = split_statements(query)
            run_script(session, done + ([rest] if rest else []), fmt, update, None)
        elif script is not None:
            run_script(session, statements_of(script), fmt, update, script.name)
        elif sys.stdin.isatty():
            interactive(session, fmt, update)
        else:
            run_script(session, statements_of(sys.stdin), fmt, update, "<stdin>")
    except StatementFailed as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        session.close()


@main.command()
@server_options()
@click.option("--after", default="latest", show_default=True,
              help="Start after this commit seq, or 'earliest' (whole retained log) or 'latest'.")
@click.option("--table", "tables", multiple=True, help="Only these tables: ns.t or ns.* (repeatable).")
@click.option("--heartbeat-ms", default=1000, show_default=True, type=int,
              help="Milliseconds between the server's heartbeats while no commit comes (50 to 300000).")
def subscribe(conn: Connection, after: str, tables: tuple[str, ...], heartbeat_ms: int) -> None:
    """Follow every commit live, printing one JSON line per event (reconnects by itself)."""
    import logging

    from flight_server.cli.client import FeedError, parse_after, print_events

    feed_log = logging.getLogger("icefloe.client")  # warnings (a server out of reach) on stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("icefloe: %(message)s"))
    feed_log.addHandler(handler)
    feed_log.setLevel(logging.WARNING)

    try:
        cursor = parse_after(after)
        print_events(conn.uri, cursor, list(tables) or None, heartbeat_ms, conn.headers() or None, conn.roots())
    except (ValueError, FeedError) as exc:
        raise click.ClickException(str(exc)) from None
    except (KeyboardInterrupt, BrokenPipeError):
        pass


@main.command()
@server_options()
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the status as one JSON object.")
def status(conn: Connection, as_json: bool) -> None:
    """Print a running server's version, uptime, tables, commit head, feed subscribers and
    lineage outbox (needs role admin when the server has --users)."""
    import json

    from flight_server.cli.status import fetch_status, render

    body = fetch_status(conn)
    click.echo(json.dumps(body, indent=2) if as_json else render(body))


@main.command()
@click.argument("table", required=False)
@server_options(default_uri=None)
@click.option("--warehouse", envvar="ICEFLOE_WAREHOUSE", default="./warehouse", show_default=True,
              help="Warehouse to maintain offline (when no --uri names a server).")
@storage_options
@click.option("--orphan-grace-s", default=3600.0, show_default=True, type=float, callback=_finite_seconds,
              help="Only files unreferenced and older than this are removed.")
def maintain(table: str | None, conn: Connection | None, warehouse: str, orphan_grace_s: float,
             **storage: Any) -> None:
    """Compact small files and manifests, expire old snapshots, remove orphan files.

    TABLE is ``ns.t``; without it every table is maintained. One JSON line per table.
    With --uri (ICEFLOE_URI) a running server does it (DoAction icefloe.maintain, admin
    role); otherwise it runs offline on --warehouse, which no server may hold.
    """
    from flight_server.cli.maintain import run_maintain

    ctx = click.get_current_context()
    if conn is not None and ctx.get_parameter_source("warehouse") == click.core.ParameterSource.COMMANDLINE:
        if ctx.get_parameter_source("uri") == click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("give --uri (a running server) or --warehouse (offline), not both")
        conn = None  # --warehouse on the command line wins over ICEFLOE_URI from the environment
    from catalog.object_store import StorageConfigError
    from flight_server.config import catalog_properties

    try:
        properties = catalog_properties(warehouse, **storage)
    except StorageConfigError as exc:
        raise click.ClickException(str(exc)) from None
    run_maintain(table, warehouse, conn, orphan_grace_s, properties)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.argument("table")
@server_options()
@click.option("--create", is_flag=True, default=False,
              help="Create the table (and its namespace) from the file's columns if it does not exist.")
@click.option("--format", "fmt", type=click.Choice(["parquet", "csv"]), default=None,
              help="File format (default: from the file name, .parquet / .pq / .csv).")
@click.option("--batch-rows", default=65536, show_default=True, type=click.IntRange(min=1),
              help="Rows per batch sent (Parquet).")
@click.option("--delimiter", default=",", show_default=True, help="CSV field delimiter (one character).")
@click.option("--idempotency-key", default=None,
              help="Retry-safe load: a second load with the same key and table commits nothing new.")
@click.option("--progress/--no-progress", default=None,
              help="Show progress on stderr (default: when stderr is a terminal).")
@click.option("--evolve", is_flag=True, default=False,
              help="Let this load add the file's new columns to the table and widen narrower columns "
                   "(schema policy evolve). Without it the file's columns must be table columns.")
def load(file: str, table: str, conn: Connection, create: bool, fmt: str | None, batch_rows: int, delimiter: str,
         idempotency_key: str | None, progress: bool | None, evolve: bool) -> None:
    """Stream a Parquet or CSV FILE into TABLE (ns.t) as one append; prints the commit as JSON.

    The table must exist unless --create is given. The file's columns must be table columns
    (matched by name, case-insensitively; missing nullable columns are nulls) unless --evolve
    is given or the table's icefloe.schema-policy is evolve. Nothing is committed if the load
    fails.
    """
    import json

    from flight_server.cli.load import run_load

    if len(delimiter) != 1:
        raise click.BadParameter("must be one character", param_hint="--delimiter")
    result = run_load(conn, file, table, fmt, create, batch_rows, delimiter, progress, idempotency_key, evolve)
    click.echo(json.dumps(result))


from flight_server.cli.ingest import ingest  # noqa: E402 - the group's commands live there

main.add_command(ingest)

if __name__ == "__main__":
    main()
