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
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    RemovePropertiesUpdate,
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
)
from starlette.responses import JSONResponse, Response

from catalog.context import commit_context
from catalog.metadata_json import dump_metadata
from catalog.object_store import client_config
from catalog.sandbox import InvalidLocationError, OutsideTableError
from flight_server.http.rest.errors import RestError, bad_request, validation_message
from flight_server.http.rest.updates import Locations, check_schema_policy, parse_requirements, parse_updates
from flight_server.http.rest.wire import Call, checked_name, identifier_from_json, page, properties_from_json
from flight_server.security import roles
from flight_server.security.auth import Principal

if TYPE_CHECKING:
    from catalog import RocksCatalog

logger = logging.getLogger("icefloe.http.rest")

MAX_TRANSACTION_TABLES = 100


def _metadata_body(location: str | None, metadata: TableMetadata, config: dict[str, str] | None = None) -> Response:
    # pyiceberg's own serialisation (aliases, no nulls), as in the metadata files themselves.
    # ``config``: the storage settings an engine needs to read and write the table's files.
    text = (f'{{"metadata-location":{json.dumps(location)},"metadata":{dump_metadata(metadata)},'
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
    except IcebergValidationError as exc:  # pyiceberg's own type parsing: "decimal(99, 2)", "fixed[-1]"
        raise bad_request(f"{what} is invalid: {str(exc)[:300]}") from None
    except (AttributeError, TypeError, KeyError):  # a model's own validator tripped over a wrong JSON type
        raise bad_request(f"{what} is invalid: a field is missing or has the wrong JSON type") from None


def _engine_from_snapshots(updates: tuple[TableUpdate, ...]) -> str | None:
    # Iceberg-Java writes the engine into every snapshot summary ("engine-name": "spark").
    for update in updates:
        if isinstance(update, AddSnapshotUpdate) and update.snapshot.summary is not None:
            engine = update.snapshot.summary.additional_properties.get("engine-name")
            if isinstance(engine, str) and engine:
                return engine[:64]
    return None


_FORMAT_VERSIONS = ("Iceberg format versions 1, 2 and 3 (version 3 tables are written by other engines; "
                    "icefloe's own writers refuse them)")


def _check_format_version(field: Any, prop: str | None) -> None:
    """Refuse a format version other than 1, 2 or 3 up front, with a message (pyiceberg's own
    error for others comes only while writing the metadata). Version 3 metadata is written by
    catalog.metadata_json; icefloe's own data writers refuse v3 tables (catalog.v3)."""
    if field is not None and (isinstance(field, bool) or field not in (1, 2, 3)):
        raise bad_request(f"format-version must be 1, 2 or 3, got {str(field)[:20]}: {_FORMAT_VERSIONS}")
    if prop is not None and prop.strip() not in ("1", "2", "3"):
        raise bad_request(f"table property format-version must be 1, 2 or 3, got {prop[:20]!r}: {_FORMAT_VERSIONS}")


def _format_version(catalog: RocksCatalog, location: str) -> int:
    """The format version of the metadata file at ``location`` (raises as reading it does)."""
    io = catalog._load_file_io(location=location)
    return int(FromInputFile.table_metadata(io.new_input(location)).format_version)


def _require(principal: Principal | None, role: str, what: str) -> None:
    """403 unless the caller has ``role`` for ``what`` (the route's own role is checked by the
    router; this is for what a body asks beyond it, see flight_server.security.roles)."""
    if principal is not None and not principal.allows(role):
        raise RestError(403, "ForbiddenException",
                        f"user {principal.name!r} has role {principal.role}; {what} needs role {role}")


def _require_properties(principal: Principal | None, keys: list[str], table: str) -> None:
    if keys:
        _require(principal, roles.ADMIN, f"changing table properties {', '.join(keys)[:200]} of {table}")


def _require_updates(principal: Principal | None, current: dict[str, str], updates: tuple[TableUpdate, ...],
                     table: str) -> None:
    """Admin-only table properties and admin-only update actions need admin (roles table)."""
    set_: dict[str, str] = {}
    removed: list[str] = []
    for update in updates:
        if isinstance(update, SetPropertiesUpdate):
            set_.update(update.updates)
        elif isinstance(update, RemovePropertiesUpdate):
            removed.extend(update.removals)
        needed = roles.COMMIT_UPDATES.get(update.action)
        if needed is not None:
            _require(principal, needed, f"update {update.action} of {table}")
    _require_properties(principal, roles.changed_admin_properties(current, set_, removed), table)


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
        _check_format_version(body.get("format-version"), properties.get("format-version"))
        _require_properties(call.principal, roles.admin_properties(properties), ".".join((*ns, name)))
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
                raise TableAlreadyExistsError(f"Table already exists: {'.'.join((*ns, name))}")
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
            # Read first, commit only what this server can serve: the catalog would register
            # V3 metadata, which pyiceberg then cannot write out (every later load a 500).
            version = _format_version(self._catalog, location)
            if version > 3:
                raise bad_request(f"metadata-location holds format version {version} metadata; {_FORMAT_VERSIONS}")
            table = self._catalog.register_table((*ns, name), location, overwrite=overwrite)
        except (InvalidLocationError, OutsideTableError):
            raise  # the sandbox's own answer (400 / 403), with its message
        except (FileNotFoundError, IsADirectoryError, PermissionError, OSError):
            raise bad_request("metadata-location cannot be read (missing, a folder, or not readable)") from None
        except (ValueError, ValidationError, IcebergValidationError):  # UnicodeDecodeError / JSON ones too
            raise bad_request("metadata-location is not an Iceberg table metadata JSON file") from None
        return _metadata_body(table.metadata_location, table.metadata, self._storage())

    def _change(self, raw: dict[str, Any], table: tuple[tuple[str, ...], str], principal: Principal | None) -> tuple[
        tuple[str, ...], tuple[TableRequirement, ...], tuple[TableUpdate, ...]
    ]:
        requirements = parse_requirements(raw.get("requirements"))
        updates = parse_updates(raw.get("updates"))
        self._locations.check_updates(updates)
        ns, name = table
        properties: dict[str, str] = {}  # a create transaction's table does not exist yet
        if self._catalog.table_exists((*ns, name)):
            properties = self._catalog.load_table((*ns, name)).metadata.properties
            check_schema_policy(properties, updates, ".".join((*ns, name)))
        _require_updates(principal, properties, updates, ".".join((*ns, name)))
        return (*ns, name), requirements, updates

    def commit(self, call: Call) -> Response:
        """``POST /v1/namespaces/{namespace}/tables/{table}``: requirements and updates."""
        ns, name = call.table
        body = call.json()
        if body.get("identifier") is not None and identifier_from_json(body["identifier"], "identifier") != (ns, name):
            raise bad_request("identifier in the body names another table than the path")
        change = self._change(body, (ns, name), call.principal)
        with commit_context(extra=self._engine(change[2])):
            response = self._catalog.commit_tables([change])[0]
        return JSONResponse({
            "metadata-location": response.metadata_location,
            "metadata": json.loads(dump_metadata(response.metadata)),
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
            identifier = identifier_from_json(raw.get("identifier"), f"table-changes[{index}]")
            changes.append(self._change(raw, identifier, call.principal))
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
