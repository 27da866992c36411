"""``icefloe maintain``: offline on a warehouse, or through a running server's DoAction."""

from __future__ import annotations

import json

import click
import pyarrow as pa
import pyarrow.flight as flight

from catalog import CatalogReadOnlyError, RocksCatalog
from catalog.append import Appender
from catalog.maintenance import all_tables, maintain
from flight_server.cli.connect import Connection, clean_error

MAINTAIN_ACTION = "icefloe.maintain"


def run_maintain(table: str | None, warehouse: str, conn: Connection | None, orphan_grace_s: float,
                 properties: dict[str, str] | None = None) -> None:
    """Maintain through the server ``conn`` names (DoAction), or offline on ``warehouse``
    (``properties``: further catalog properties, e.g. an S3 warehouse's catalog path and
    FileIO settings)."""
    body: dict[str, object] = {"orphan_grace_s": orphan_grace_s}
    if table:
        body["table"] = table
    if conn is not None:
        client = conn.client()
        try:
            action = flight.Action(MAINTAIN_ACTION, json.dumps(body).encode("utf-8"))
            for result in client.do_action(action, conn.options()):
                click.echo(result.body.to_pybytes().decode("utf-8"))
        except (flight.FlightError, pa.ArrowException) as exc:
            raise click.ClickException(clean_error(exc, conn.uri)) from None
        finally:
            client.close()
        return
    try:
        catalog = RocksCatalog("icefloe", **{**(properties or {}), "warehouse": warehouse, "read-only": "false"})
    except CatalogReadOnlyError:
        raise click.ClickException(
            "a server holds this warehouse; run `icefloe maintain --uri grpc://HOST:PORT` instead"
        ) from None
    try:
        appender = Appender(catalog)
        if table:
            identifier = tuple(table.split("."))
            if len(identifier) < 2 or not catalog.table_exists(identifier):
                raise click.ClickException(f"table {table} does not exist")
            targets = [identifier]
        else:
            targets = all_tables(appender)
        for identifier in targets:
            click.echo(json.dumps(maintain(appender, identifier, orphan_grace_s=orphan_grace_s).to_json()))
    finally:
        catalog.close()
