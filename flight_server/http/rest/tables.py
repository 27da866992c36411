"""Table endpoints of the REST catalog: list, create (and stage-create), load, exists,
register, commit, drop (with purge), rename, metrics reports, and the multi-table
transaction. Every change goes through ``RocksCatalog``, so it is an ordinary icefloe commit
(compare-and-swap, commit-log record, feed, lineage)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import AddSnapshotUpdate, TableRequirement, TableUpdate
from starlette.responses import JSONResponse, Response

from catalog.context import commit_context
from catalog.object_store import client_config
from flight_server.http.rest.errors import bad_request, validation_message
from flight_server.http.rest.updates import Locations, check_schema_policy, parse_requirements, parse_updates
from flight_server.http.rest.wire import Call, checked_name, identifier_from_json, page, properties_from_json

if TYPE_CHECKING:
    from catalog import RocksCatalog

logger = logging.getLogger("icefloe.http.rest")

MAX_TRANSACTION_TABLES = 100


def _metadata_body(location: str | None, metadata: TableMetadata, config: dict[str, str] | None = None) -> Response:
    # pyiceberg's own serialisation (aliases, no nulls), as in the metadata files themselves.
    # ``config``: the storage settings an engine needs to read and write the table's files.
    text = (f'{{"metadata-location":{json.dumps(location)},"metadata":{metadata.model_dump_json()},'
            f'"config":{json.dumps(config or {})}')
    if config:
        # The spec's credential vending: the credentials that hold for the table's location.
        text += f',"storage-credentials":{json.dumps([{"prefix": metadata.location, "config": config}])}'
    text += "}"
    return Response(text, media_type="application/json")


def _model(model: Any, raw: Any, what: str) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise bad_request(validation_message(exc, what)) from None


def _engine_from_snapshots(updates: tuple[TableUpdate, ...]) -> str | None:
    # Iceberg-Java writes the engine into every snapshot summary ("engine-name": "spark").
    for update in updates:
        if isinstance(update, AddSnapshotUpdate) and update.snapshot.summary is not None:
            engine = update.snapshot.summary.additional_properties.get("engine-name")
            if isinstance(engine, str) and engine:
                return engine[:64]
    return None


class TableHandlers:
    """Handlers of the table endpoints.

    Args:
        catalog: The catalog the tables live in.
        locations: Which locations clients may name (inside the warehouse).
    """

    def __init__(self, catalog: RocksCatalog, locations: Locations) -> None:
        self._catalog = catalog
        self._locations = locations

    # -- reads ---------------------------------------------------------------------------

    def list(self, call: Call) -> Response:
        """``GET /v1/namespaces/{namespace}/tables[?pageToken=..&pageSize=N]``."""
        found = [tuple(identifier) for identifier in self._catalog.list_tables(call.namespace)]
        chunk, token = page(found, lambda identifier: identifier, call.query)
        return JSONResponse({
            "identifiers": [{"namespace": list(i[:-1]), "name": i[-1]} for i in chunk],
            "next-page-token": token,
        })

    def _storage(self) -> dict[str, str]:
        return client_config(self._catalog._io_properties(), self._catalog.warehouse)

    def load(self, call: Call) -> Response:
        """``GET /v1/namespaces/{namespace}/tables/{table}``: a ``LoadTableResult``."""
        snapshots = call.query.get("snapshots")
        if snapshots not in (None, "all", "refs"):
            raise bad_request("snapshots must be all or refs")
        ns, name = call.table
        table = self._catalog.load_table((*ns, name))
        return _metadata_body(table.metadata_location, table.metadata, self._storage())

    def exists(self, call: Call) -> Response:
        """``HEAD /v1/namespaces/{namespace}/tables/{table}``: 204 or 404."""
        ns, name = call.table
        return Response(status_code=204 if self._catalog.table_exists((*ns, name)) else 404)

    def metrics(self, call: Call) -> Response:
        """``POST .../tables/{table}/metrics``: scan and commit reports, accepted and dropped.

        Accepted for any well-formed name: Iceberg-Java reports asynchronously, sometimes
        about a table a create transaction has not committed yet, and only logs a refusal.
        """
        ns, name = call.table
        body = call.json()
        logger.debug("metrics report %s for %s", str(body.get("report-type"))[:32], ".".join((*ns, name)))
        return Response(status_code=204)

    # -- changes -----------------------------------------------------------------------

    def create(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/tables``; with ``stage-create`` nothing is written
        and the answer is the metadata a create transaction then commits (CTAS)."""
        ns = call.namespace
        body = call.json()
        name = checked_name(body.get("name"), "table")
        schema = _model(Schema, body.get("schema"), "schema")
        spec = _model(PartitionSpec, body["partition-spec"], "partition-spec") if body.get("partition-spec") \
            else UNPARTITIONED_PARTITION_SPEC
        order = _model(SortOrder, body["write-order"], "write-order") if body.get("write-order") \
            else UNSORTED_SORT_ORDER
        properties = properties_from_json(body.get("properties"), "properties")
        location = body.get("location")
        if location is not None:
            if not isinstance(location, str):
                raise bad_request("location must be a string")
            self._locations.check(location, "location")
        stage = body.get("stage-create", False)
        if not isinstance(stage, bool):
            raise bad_request("stage-create must be true or false")
        if stage:
            if self._catalog.table_exists((*ns, name)):
                raise TableAlreadyExistsError(f"Table {'.'.join((*ns, name))} already exists")
            staged = self._catalog._create_staged_table((*ns, name), schema, location, spec, order, properties)
            return _metadata_body(None, staged.metadata, self._storage())
        table = self._catalog.create_table((*ns, name), schema, location, spec, order, properties)
        return _metadata_body(table.metadata_location, table.metadata, self._storage())

    def register(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/register`` with ``name`` and ``metadata-location``."""
        ns = call.namespace
        body = call.json()
        name = checked_name(body.get("name"), "table")
        location = body.get("metadata-location")
        if not isinstance(location, str):
            raise bad_request("metadata-location must be a string")
        self._locations.check(location, "metadata-location")
        overwrite = body.get("overwrite", False)
        if not isinstance(overwrite, bool):
            raise bad_request("overwrite must be true or false")
        try:
            table = self._catalog.register_table((*ns, name), location, overwrite=overwrite)
        except (FileNotFoundError, OSError):
            raise bad_request("metadata-location cannot be read") from None
        return _metadata_body(table.metadata_location, table.metadata, self._storage())

    def _change(self, raw: dict[str, Any], table: tuple[tuple[str, ...], str]) -> tuple[
        tuple[str, ...], tuple[TableRequirement, ...], tuple[TableUpdate, ...]
    ]:
        requirements = parse_requirements(raw.get("requirements"))
        updates = parse_updates(raw.get("updates"))
        self._locations.check_updates(updates)
        ns, name = table
        if self._catalog.table_exists((*ns, name)):
            properties = self._catalog.load_table((*ns, name)).metadata.properties
            check_schema_policy(properties, updates, ".".join((*ns, name)))
        return (*ns, name), requirements, updates

    def commit(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/tables/{table}``: requirements and updates."""
        ns, name = call.table
        body = call.json()
        if body.get("identifier") is not None and identifier_from_json(body["identifier"], "identifier") != (ns, name):
            raise bad_request("identifier in the body names another table than the path")
        change = self._change(body, (ns, name))
        with commit_context(extra=self._engine(change[2])):
            response = self._catalog.commit_tables([change])[0]
        return JSONResponse({
            "metadata-location": response.metadata_location,
            "metadata": json.loads(response.metadata.model_dump_json()),
        })

    def commit_transaction(self, call: Call) -> Response:
        """``POST /v1/transactions/commit``: several tables, all in one write batch or none."""
        body = call.json()
        raw_changes = body.get("table-changes")
        if not isinstance(raw_changes, list) or not raw_changes:
            raise bad_request("table-changes must be a non-empty JSON array")
        if len(raw_changes) > MAX_TRANSACTION_TABLES:
            raise bad_request(f"at most {MAX_TRANSACTION_TABLES} tables in one transaction")
        changes = []
        for index, raw in enumerate(raw_changes):
            if not isinstance(raw, dict):
                raise bad_request(f"table-changes[{index}] must be a JSON object")
            changes.append(self._change(raw, identifier_from_json(raw.get("identifier"), f"table-changes[{index}]")))
        with commit_context(extra=self._engine(tuple(u for change in changes for u in change[2]))):
            self._catalog.commit_tables(changes)
        return Response(status_code=204)

    @staticmethod
    def _engine(updates: tuple[TableUpdate, ...]) -> dict[str, Any]:
        engine = _engine_from_snapshots(updates)
        return {"engine": engine} if engine else {}

    def drop(self, call: Call) -> Response:
        """``DELETE /v1/namespaces/{namespace}/tables/{table}[?purgeRequested=true]``."""
        ns, name = call.table
        if call.flag("purgeRequested"):
            self._catalog.purge_table((*ns, name))
        else:
            self._catalog.drop_table((*ns, name))
        return Response(status_code=204)

    def rename(self, call: Call) -> Response:
        """``POST /v1/tables/rename`` with ``source`` and ``destination`` identifiers."""
        body = call.json()
        src_ns, src = identifier_from_json(body.get("source"), "source")
        dst_ns, dst = identifier_from_json(body.get("destination"), "destination")
        self._catalog.rename_table((*src_ns, src), (*dst_ns, dst))
        return Response(status_code=204)
