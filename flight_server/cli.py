"""The ``icefloe`` command line (click; every ``serve`` flag also reads ``ICEFLOE_*``)."""

from __future__ import annotations

import math

import click

from flight_server import __version__
from flight_server.config import Config
from flight_server.logging_config import configure_logging


def _finite_seconds(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise click.BadParameter("must be a finite number of seconds >= 0", param=param)
    return value


@click.group()
@click.version_option(__version__, prog_name="icefloe")
def main() -> None:
    """icefloe: an Arrow Flight SQL server for an Iceberg lakehouse."""


@main.command()
@click.option("--warehouse", envvar="ICEFLOE_WAREHOUSE", default="./warehouse", show_default=True,
              help="Warehouse folder (or s3:// URI) holding catalog.rocksdb and the tables.")
@click.option("--host", envvar="ICEFLOE_HOST", default="127.0.0.1", show_default=True)
@click.option("--port", envvar="ICEFLOE_PORT", default=31337, show_default=True, type=int,
              help="TCP port; 0 picks a free one (the readiness line names it).")
@click.option("--users", "users_file", envvar="ICEFLOE_USERS", default=None,
              help="TOML users file; with it every call must authenticate.")
@click.option("--tls-cert", envvar="ICEFLOE_TLS_CERT", default=None)
@click.option("--tls-key", envvar="ICEFLOE_TLS_KEY", default=None)
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
@click.option("--max-concurrent-queries", envvar="ICEFLOE_MAX_CONCURRENT_QUERIES", default=16, show_default=True,
              type=int, help="Queries that may run at once; more wait briefly, then get RESOURCE_EXHAUSTED.")
@click.option("--advertise-uri", "advertise_uris", envvar="ICEFLOE_ADVERTISE_URI", multiple=True,
              help="A URI endpoints name (repeat for a fleet of servers over one warehouse); default: none.")
@click.option("--memory-limit", envvar="ICEFLOE_MEMORY_LIMIT", default=None,
              help="DuckDB memory per running query (e.g. 2GB); beyond it sorts and joins spill to disk.")
@click.option("--log-level", envvar="ICEFLOE_LOG_LEVEL", default="info", show_default=True)
def serve(**options: object) -> None:
    """Serve the warehouse over Arrow Flight SQL."""
    config = Config(**options)  # type: ignore[arg-type]
    configure_logging(config.log_level)
    from flight_server.server import serve as run
    from flight_server.users import SecurityConfigError

    try:
        run(config)
    except SecurityConfigError as exc:
        raise click.ClickException(str(exc)) from None


@main.command("rotate-key")
@click.option("--warehouse", envvar="ICEFLOE_WAREHOUSE", default="./warehouse", show_default=True)
@click.option("--keep", default=1, show_default=True, type=click.IntRange(min=0),
              help="Old keys that still verify tokens and handles already given out.")
def rotate_key(warehouse: str, keep: int) -> None:
    """Make a new signing key for bearer tokens and handles; restart the servers to use it."""
    from flight_server.tokens import rotate_key as rotate
    from flight_server.users import SecurityConfigError

    try:
        click.echo(f"new signing key in {rotate(warehouse, keep)}; restart the servers of this warehouse")
    except SecurityConfigError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
def passwd() -> None:
    """Read a password on stdin and print its salted Argon2id hash for the --users file."""
    from flight_server.users import hash_password, read_password_from_stdin

    try:
        password = read_password_from_stdin()
        click.echo(hash_password(password))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option("--server", "server_location", envvar="ICEFLOE_SERVER", default="grpc://127.0.0.1:31337",
              show_default=True, help="Server location (grpc:// or grpc+tls://).")
@click.option("--user", envvar="ICEFLOE_USER", required=True, help="User name from the server's --users file.")
@click.option("--tls-root-certs", envvar="ICEFLOE_TLS_ROOT_CERTS", default=None,
              help="PEM file of the CA that signed the server's certificate (grpc+tls).")
def login(server_location: str, user: str, tls_root_certs: str | None) -> None:
    """Read a password on stdin, log in, and print a bearer token (for ICEFLOE_TOKEN / --token)."""
    from flight_server.login import login_token
    from flight_server.users import read_password_from_stdin

    try:
        click.echo(login_token(server_location, user, read_password_from_stdin(), tls_root_certs))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.argument("query")
@click.option("--uri", envvar="ICEFLOE_URI", default="grpc://127.0.0.1:31337", show_default=True,
              help="Server location.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--update", is_flag=True, default=False, help="Send as an update (CommandStatementUpdate).")
@click.option("--token", envvar="ICEFLOE_TOKEN", default=None, help="Bearer token for a server with --users.")
def sql(query: str, uri: str, fmt: str, update: bool, token: str | None) -> None:
    """Run one SQL statement against an icefloe server and print the result."""
    import pyarrow as pa
    import pyarrow.flight as flight

    from flight_server.sql_client import print_table, run_query, run_update

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    try:
        if update:
            click.echo(f"{run_update(uri, query, headers)} rows affected")
        else:
            print_table(run_query(uri, query, headers), fmt)
    except (flight.FlightError, pa.ArrowException) as exc:
        raise click.ClickException(str(exc).split(". Detail:", 1)[0]) from None


@main.command()
@click.option("--location", envvar="ICEFLOE_LOCATION", default="grpc://127.0.0.1:31337", show_default=True,
              help="Server to follow.")
@click.option("--after", default="latest", show_default=True,
              help="Start after this commit seq, or 'earliest' (whole retained log) or 'latest'.")
@click.option("--table", "tables", multiple=True, help="Only these tables: ns.t or ns.* (repeatable).")
@click.option("--heartbeat-ms", default=1000, show_default=True, type=int)
@click.option("--token", envvar="ICEFLOE_TOKEN", default=None, help="Bearer token for a server with --users.")
def subscribe(location: str, after: str, tables: tuple[str, ...], heartbeat_ms: int, token: str | None) -> None:
    """Follow every commit live, printing one JSON line per event (reconnects by itself)."""
    from flight_server.client import FeedError, parse_after, print_events

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else None
    try:
        print_events(location, parse_after(after), list(tables) or None, heartbeat_ms, headers)
    except (ValueError, FeedError) as exc:
        raise click.ClickException(str(exc)) from None
    except (KeyboardInterrupt, BrokenPipeError):
        pass


@main.command()
@click.argument("table", required=False)
@click.option("--warehouse", envvar="ICEFLOE_WAREHOUSE", default="./warehouse", show_default=True,
              help="Warehouse to maintain offline (when no server holds it).")
@click.option("--server", "server_location", envvar="ICEFLOE_SERVER", default=None,
              help="Ask a running server instead, e.g. grpc://127.0.0.1:31337 (DoAction icefloe.maintain).")
@click.option("--orphan-grace-s", default=3600.0, show_default=True, type=float, callback=_finite_seconds,
              help="Only files unreferenced and older than this are removed.")
def maintain(table: str | None, warehouse: str, server_location: str | None, orphan_grace_s: float) -> None:
    """Compact small files and manifests, expire old snapshots, remove orphan files.

    TABLE is ``ns.t``; without it every table is maintained. One JSON line per table.
    """
    from flight_server.maintain_cli import run_maintain

    run_maintain(table, warehouse, server_location, orphan_grace_s)


if __name__ == "__main__":
    main()
