"""``icefloe maintain``: offline on a warehouse, or through a running server's DoAction."""

from __future__ import annotations

import json

import click
import pyarrow.flight as flight

from catalog import CatalogReadOnlyError, RocksCatalog
from catalog.append import Appender
from catalog.maintenance import all_tables, maintain

MAINTAIN_ACTION = "icefloe.maintain"


def run_maintain(table: str | None, warehouse: str, server_location: str | None, orphan_grace_s: float) -> None:
    body: dict[str, object] = {"orphan_grace_s": orphan_grace_s}
    if table:
        body["table"] = table
    if server_location:
        client = flight.FlightClient(server_location)
        try:
            for result in client.do_action(flight.Action(MAINTAIN_ACTION, json.dumps(body).encode("utf-8"))):
                click.echo(result.body.to_pybytes().decode("utf-8"))
        except flight.FlightError as exc:
            raise click.ClickException(str(exc).split(". Detail:")[0]) from None
        finally:
            client.close()
        return
    try:
        catalog = RocksCatalog("icefloe", warehouse=warehouse, **{"read-only": "false"})
    except CatalogReadOnlyError:
        raise click.ClickException(
            "a server holds this warehouse; run `icefloe maintain --server grpc://HOST:PORT` instead"
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
