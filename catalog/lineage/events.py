"""Turning commit-log records (and refused writes) into OpenLineage run events.

Every commit is one run: a ``START`` and a ``COMPLETE`` event sharing a runId that is a UUIDv7
derived from the commit itself (its time, sequence and table uuid), so building the events
again — after a crash, on re-delivery — yields the same run. A write that was refused or
failed is a run of its own: ``START`` and ``FAIL`` with an ``errorMessage`` run facet; one the
client cancelled or abandoned mid-stream ends with ``ABORT`` instead (OpenLineage's "stopped
abnormally": nothing failed, it stopped being observed), with the same facets.

Keys of ``CommitRecord.extra`` (set by writers through ``catalog.commit_context(extra=...)``)
that lineage reads:

``sql`` (str)
    The SQL statement that made the commit. Becomes the ``sql`` job facet; for
    ``INSERT ... SELECT`` and ``CREATE TABLE ... AS SELECT`` its input tables become input
    datasets and, where the text determines it, a ``columnLineage`` facet is added.
``inputs`` (list[str])
    Qualified names (``ns.table``) of tables the write read, when the writer knows them
    without SQL (merged with the ones found in ``sql``).
``started_at_us`` (int)
    When the write began (µs since the epoch, UTC): the ``START`` event's time. Defaults to
    the commit time.
``job_name`` (str)
    A job name chosen by the writer instead of ``icefloe.<operation>.<ns.table>``.
``input_datasets`` (list[{"namespace": str, "name": str}])
    Datasets outside the lake the write read (an ingest connector's source), named by the
    writer in OpenLineage's own terms; added to the inputs as they are.
``renamed_from`` (str)
    Set by the catalog on a rename: the previous ``ns.table``.
``column_lineage`` (dict[str, list[[str, str]]])
    Column lineage a writer declared (``icefloe.pipe``'s ``columns``): output column ->
    ``[input table, input column]`` pairs. Becomes the ``columnLineage`` facet when the SQL
    gave none; never guessed, so it is absent when not declared.

The builders return plain JSON-ready dicts that follow the OpenLineage 2-0-2 spec; every facet
carries the ``_schemaURL`` of the facet schema version it follows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import uuid6
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import NestedField, StructType
from pyiceberg.view.metadata import ViewMetadata

from catalog.commit_log import CommitRecord
from catalog.expectations import lineage_facet_body
from catalog.lineage import sql_lineage
from catalog.lineage.redact import hash_name, redact_text, redact_uri

ICEFLOE_VERSION = "0.1.0"
PRODUCER = f"urn:icefloe:{ICEFLOE_VERSION}"
SPEC_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
INTEGRATION = "ICEFLOE"

# facet key -> (schema file $id, definition name): the versions in ../shared/openlineage-spec.
FACET_SCHEMAS: dict[str, tuple[str, str]] = {
    "schema": ("https://openlineage.io/spec/facets/1-2-0/SchemaDatasetFacet.json", "SchemaDatasetFacet"),
    "version": (
        "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json",
        "DatasetVersionDatasetFacet",
    ),
    "catalog": ("https://openlineage.io/spec/facets/1-1-0/CatalogDatasetFacet.json", "CatalogDatasetFacet"),
    "storage": ("https://openlineage.io/spec/facets/1-0-1/StorageDatasetFacet.json", "StorageDatasetFacet"),
    "datasetType": ("https://openlineage.io/spec/facets/1-0-1/DatasetTypeDatasetFacet.json", "DatasetTypeDatasetFacet"),
    "lifecycleStateChange": (
        "https://openlineage.io/spec/facets/1-0-1/LifecycleStateChangeDatasetFacet.json",
        "LifecycleStateChangeDatasetFacet",
    ),
    "columnLineage": (
        "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json",
        "ColumnLineageDatasetFacet",
    ),
    "outputStatistics": (
        "https://openlineage.io/spec/facets/1-0-2/OutputStatisticsOutputDatasetFacet.json",
        "OutputStatisticsOutputDatasetFacet",
    ),
    "jobType": ("https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json", "JobTypeJobFacet"),
    "sql": ("https://openlineage.io/spec/facets/1-1-0/SQLJobFacet.json", "SQLJobFacet"),
    "processing_engine": (
        "https://openlineage.io/spec/facets/1-1-1/ProcessingEngineRunFacet.json",
        "ProcessingEngineRunFacet",
    ),
    "dataQualityAssertions": (
        "https://openlineage.io/spec/facets/1-1-0/DataQualityAssertionsDatasetFacet.json",
        "DataQualityAssertionsDatasetFacet",
    ),
    "errorMessage": ("https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json", "ErrorMessageRunFacet"),
}
# icefloe's own run facet (commit seq, table uuid, snapshot ids, principal); schema shipped in
# catalog/lineage/IcefloeCommitRunFacet.json.
ICEFLOE_FACET = "icefloe_commit"
ICEFLOE_FACET_SCHEMA = "urn:icefloe:spec:facets:1-0-0:IcefloeCommitRunFacet.json#/$defs/IcefloeCommitRunFacet"

LIFECYCLE = {
    "view-create": "CREATE",
    "view-register": "CREATE",
    "view-replace": "ALTER",
    "view-drop": "DROP",
    "view-rename": "RENAME",
    "create": "CREATE",
    "register": "CREATE",
    "drop": "DROP",
    "rename": "RENAME",
    "overwrite": "OVERWRITE",
    "schema": "ALTER",
    "truncate": "TRUNCATE",
}


@dataclass(frozen=True)
class LineageSettings:
    """How events name things.

    Attributes:
        namespace: OpenLineage namespace of icefloe's datasets and jobs.
        hash_names: Replace dataset and job names by a stable hash (and leave out SQL text).
        include_sql: Add the ``sql`` job facet when a writer supplied the statement.
        catalog_name: Iceberg catalog name reported in the ``catalog`` facet.
        catalog_uri: Where the catalog is served (e.g. ``grpc://host:port``), redacted.
        warehouse: Warehouse location, redacted.
        engine_version: Reported in ``processing_engine``.
        adapter_version: The openlineage-python version, reported in ``processing_engine``.
    """

    namespace: str
    hash_names: bool = False
    include_sql: bool = True
    catalog_name: str = "icefloe"
    catalog_uri: str | None = None
    warehouse: str | None = None
    engine_version: str = ICEFLOE_VERSION
    adapter_version: str | None = None

    def dataset_name(self, qualified: str) -> str:
        return hash_name(qualified) if self.hash_names else qualified


def facet(key: str, **fields: Any) -> dict[str, Any]:
    schema_id, definition = FACET_SCHEMAS[key]
    return {"_producer": PRODUCER, "_schemaURL": f"{schema_id}#/$defs/{definition}", **fields}


def iso_time(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC).isoformat().replace("+00:00", "Z")


def commit_run_id(record: CommitRecord) -> str:
    """The run's UUIDv7: commit time in the timestamp bits, the rest hashed from the commit.

    The commits of one Flight SQL transaction are one run: its id (a UUIDv7 made when the
    transaction began) is the runId of every table's events.
    """
    transaction = transaction_run_id(record)
    if transaction is not None:
        return transaction
    ms, sub_ms = divmod(record.committed_at_us, 1000)
    digest = hashlib.sha256(
        f"icefloe-commit:{record.table_uuid}:{record.seq}:{record.committed_at_us}".encode()
    ).digest()
    rand_b = int.from_bytes(digest[:8], "big") & ((1 << 62) - 1)
    value = ((ms & 0xFFFFFFFFFFFF) << 80) | (sub_ms << 64) | rand_b
    return str(uuid6.UUID(int=value, version=7))


def transaction_run_id(record: CommitRecord) -> str | None:
    """The run id of a commit made by a Flight SQL transaction, else None."""
    value = record.extra.get("transaction_id") if record.extra else None
    if not isinstance(value, str):
        return None
    try:
        return str(uuid6.UUID(hex=value))
    except ValueError:
        return None


def new_run_id() -> str:
    return str(uuid6.uuid7())


def schema_fields(fields: tuple[NestedField, ...] | list[NestedField]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for position, field in enumerate(fields, start=1):
        entry: dict[str, Any] = {"name": field.name, "type": str(field.field_type), "ordinal_position": position}
        if field.doc:
            entry["description"] = field.doc
        if isinstance(field.field_type, StructType):
            entry["type"] = "struct"
            entry["fields"] = schema_fields(field.field_type.fields)
        out.append(entry)
    return out


def job_type_facet(operation: str) -> dict[str, Any]:
    return facet("jobType", processingType="BATCH", integration=INTEGRATION, jobType=operation.upper())


def _run_facets(settings: LineageSettings) -> dict[str, Any]:
    engine: dict[str, Any] = {"name": "icefloe", "version": settings.engine_version}
    if settings.adapter_version:
        engine["openlineageAdapterVersion"] = settings.adapter_version
    return {"processing_engine": facet("processing_engine", **engine)}


def _event(
    event_type: str,
    time_us: int,
    run_id: str,
    run_facets: dict[str, Any],
    job: dict[str, Any],
    inputs: list[dict[str, Any]],
    outputs: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "eventType": event_type,
        "eventTime": iso_time(time_us),
        "producer": PRODUCER,
        "schemaURL": SPEC_URL,
        "run": {"runId": run_id, "facets": run_facets},
        "job": job,
        "inputs": inputs,
        "outputs": outputs,
    }


def _job(settings: LineageSettings, operation: str, qualified: str, extra: dict[str, Any],
         view_query: tuple[str, str] | None = None) -> dict[str, Any]:
    name = extra.get("job_name")
    if not isinstance(name, str) or not name or settings.hash_names:
        name = f"icefloe.{operation}.{settings.dataset_name(qualified)}"
    facets: dict[str, Any] = {"jobType": job_type_facet(operation)}
    sql = extra.get("sql")
    dialect = "duckdb"
    if view_query is not None and not (isinstance(sql, str) and sql):
        sql, dialect = view_query  # a view created over REST: its definition is the job's SQL
    if isinstance(sql, str) and sql and settings.include_sql and not settings.hash_names:
        facets["sql"] = facet("sql", query=redact_text(sql), dialect=dialect)
    return {"namespace": settings.namespace, "name": name, "facets": facets}


def commit_schema(metadata: TableMetadata, record: CommitRecord) -> Schema:
    """The schema the commit wrote with: its snapshot's schema for data commits (so a later
    metadata file serves as well as the commit's own), else the metadata's current schema."""
    if record.added_rows is not None and record.snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(record.snapshot_id)
        if snapshot is not None and snapshot.schema_id is not None:
            for schema in metadata.schemas:
                if schema.schema_id == snapshot.schema_id:
                    return schema
    return metadata.schema()


def view_query(view: ViewMetadata) -> tuple[str, str] | None:
    """(SQL, dialect) of a view's current version: DuckDB's if it has one, else its first."""
    current = next((v for v in view.versions if v.version_id == view.current_version_id), None)
    if current is None or not current.representations:
        return None
    queries = [(r.root.sql, r.root.dialect.lower()) for r in current.representations]
    return next((q for q in queries if q[1] == "duckdb"), queries[0])


def _view_schema(view: ViewMetadata) -> Schema | None:
    current = next((v for v in view.versions if v.version_id == view.current_version_id), None)
    return next((s for s in view.schemas if current is not None and s.schema_id == current.schema_id), None)


def _dataset_facets(settings: LineageSettings, record: CommitRecord, metadata: TableMetadata | None,
                    view: ViewMetadata | None = None) -> dict[str, Any]:
    facets: dict[str, Any] = {}
    catalog: dict[str, Any] = {
        "framework": "iceberg",
        "type": "icefloe",
        "name": settings.catalog_name,
        "source": "icefloe",
    }
    if settings.catalog_uri:
        catalog["metadataUri"] = redact_uri(settings.catalog_uri)
    if settings.warehouse:
        catalog["warehouseUri"] = redact_uri(settings.warehouse)
    facets["catalog"] = facet("catalog", **catalog)
    if record.extra.get("kind") == "view":
        # A view stores no data: its type and schema, no storage facet.
        facets["datasetType"] = facet("datasetType", datasetType="VIEW")
        schema_of_view = _view_schema(view) if view is not None and record.operation != "view-drop" else None
        if schema_of_view is not None:
            facets["schema"] = facet("schema", fields=schema_fields(schema_of_view.fields))
        return _with_lifecycle(settings, record, facets)
    file_format = "parquet"
    if metadata is not None:
        file_format = str(metadata.properties.get("write.format.default", "parquet")).lower()
        if record.operation != "drop":
            schema: Schema = commit_schema(metadata, record)
            facets["schema"] = facet("schema", fields=schema_fields(schema.fields))
    facets["storage"] = facet("storage", storageLayer="iceberg", fileFormat=file_format)
    return _with_lifecycle(settings, record, facets)


def _with_lifecycle(settings: LineageSettings, record: CommitRecord, facets: dict[str, Any]) -> dict[str, Any]:
    lifecycle = LIFECYCLE.get(record.operation)
    if lifecycle is not None:
        change: dict[str, Any] = {"lifecycleStateChange": lifecycle}
        previous = record.extra.get("renamed_from")
        if lifecycle == "RENAME" and isinstance(previous, str):
            change["previousIdentifier"] = {"namespace": settings.namespace, "name": settings.dataset_name(previous)}
        facets["lifecycleStateChange"] = facet("lifecycleStateChange", **change)
    return facets


def _snapshot_size(metadata: TableMetadata | None, snapshot_id: int | None) -> int | None:
    if metadata is None or snapshot_id is None:
        return None
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None or snapshot.summary is None:
        return None
    value = snapshot.summary.get("added-files-size")
    return int(value) if value is not None else None


def _column_lineage(settings: LineageSettings, found: sql_lineage.SqlLineage) -> dict[str, Any] | None:
    if found.columns is None:
        return None

    def field_ref(dep: sql_lineage.ColumnDependency) -> dict[str, Any]:
        table, column = dep.source
        return {
            "namespace": settings.namespace,
            "name": settings.dataset_name(table),
            "field": column,
            "transformations": [{"type": dep.type, "subtype": dep.subtype}],
        }

    fields = {target: {"inputFields": [field_ref(d) for d in deps]} for target, deps in found.columns.items()}
    body: dict[str, Any] = {"fields": fields}
    if found.dataset:
        body["dataset"] = [field_ref(d) for d in found.dataset]
    return facet("columnLineage", **body)


def _declared_column_lineage(settings: LineageSettings, declared: Any) -> dict[str, Any] | None:
    """The ``columnLineage`` facet of ``extra["column_lineage"]`` (transformations unknown, so
    none are claimed)."""
    if not isinstance(declared, dict) or not declared:
        return None
    fields: dict[str, Any] = {}
    for target, refs in declared.items():
        inputs = [
            {"namespace": settings.namespace, "name": settings.dataset_name(ref[0]), "field": ref[1]}
            for ref in refs if isinstance(ref, list) and len(ref) == 2 and all(isinstance(p, str) for p in ref)
        ]
        if isinstance(target, str) and inputs:
            fields[target] = {"inputFields": inputs}
    return facet("columnLineage", fields=fields) if fields else None


def build_commit_events(
    record: CommitRecord,
    metadata: TableMetadata | None,
    settings: LineageSettings,
    columns_of: Callable[[str], list[str] | None] = lambda _name: None,
    view: ViewMetadata | None = None,
) -> list[dict[str, Any]]:
    """The ``START`` and ``COMPLETE`` events of one landed commit.

    Args:
        record: The commit-log record.
        metadata: The table metadata written by the commit (None when it is no longer
            readable: the events then carry no schema or size).
        settings: Naming and redaction settings.
        columns_of: Columns of an input table named in the commit's SQL (for column lineage).
        view: For a view's commit, the view metadata it wrote (inputs and column lineage then
            come from the view's query, its schema from the view).
    """
    extra = record.extra or {}
    qualified = record.qualified_name
    run_id = commit_run_id(record)
    query = view_query(view) if view is not None and record.operation != "view-drop" else None
    job = _job(settings, record.operation, qualified, extra, query)
    run_facets = _run_facets(settings)
    commit_facet: dict[str, Any] = {
        "_producer": PRODUCER,
        "_schemaURL": ICEFLOE_FACET_SCHEMA,
        "seq": record.seq,
        "operation": record.operation,
    }
    for key, value in (
        ("tableUuid", record.table_uuid),
        ("snapshotId", record.snapshot_id),
        ("parentSnapshotId", record.parent_snapshot_id),
        ("principal", record.principal),
    ):
        if value is not None:
            commit_facet[key] = value
    run_facets[ICEFLOE_FACET] = commit_facet

    inputs_named: list[str] = [i for i in extra.get("inputs") or [] if isinstance(i, str)]
    found = sql_lineage.SqlLineage()
    sql = extra.get("sql")
    if query is not None:
        view_schema = _view_schema(view) if view is not None else None
        columns = [f.name for f in view_schema.fields] if view_schema is not None else []
        found = sql_lineage.analyze_view(query[0], query[1], columns, columns_of)
    elif isinstance(sql, str) and sql:
        target_columns = [f.name for f in commit_schema(metadata, record).fields] if metadata is not None else []
        found = sql_lineage.analyze(sql, qualified, target_columns, columns_of)
    for name in found.inputs:
        if name not in inputs_named:
            inputs_named.append(name)
    inputs = [
        {"namespace": settings.namespace, "name": settings.dataset_name(n)} for n in inputs_named if n != qualified
    ]
    inputs.extend(_external_inputs(extra))

    dataset_facets = _dataset_facets(settings, record, metadata, view)
    lineage_facet = _column_lineage(settings, found) or _declared_column_lineage(settings, extra.get("column_lineage"))
    if lineage_facet is not None:
        dataset_facets["columnLineage"] = lineage_facet
    output: dict[str, Any] = {
        "namespace": settings.namespace,
        "name": settings.dataset_name(qualified),
        "facets": dataset_facets,
    }

    complete_facets = dict(dataset_facets)
    if view is not None and record.operation != "view-drop":
        complete_facets["version"] = facet("version", datasetVersion=str(view.current_version_id))
    if record.snapshot_id is not None and record.operation != "drop":
        complete_facets["version"] = facet("version", datasetVersion=str(record.snapshot_id))
    assertions = lineage_facet_body(extra.get("quality"))
    if assertions is not None:  # the quality gate's results for the rows this commit wrote
        for assertion in assertions:
            assertion["content"] = redact_text(assertion["content"])
        complete_facets["dataQualityAssertions"] = facet("dataQualityAssertions", assertions=assertions)
    complete_output: dict[str, Any] = {**output, "facets": complete_facets}
    if record.added_rows is not None or record.added_files is not None:
        stats: dict[str, Any] = {}
        if record.added_rows is not None:
            stats["rowCount"] = record.added_rows
        size = _snapshot_size(metadata, record.snapshot_id)
        if size is not None:
            stats["size"] = size
        if record.added_files is not None:
            stats["fileCount"] = record.added_files
        complete_output["outputFacets"] = {"outputStatistics": facet("outputStatistics", **stats)}

    started = extra.get("started_at_us")
    start_us = started if isinstance(started, int) and 0 < started <= record.committed_at_us else record.committed_at_us
    return [
        _event("START", start_us, run_id, run_facets, job, inputs, [output]),
        _event("COMPLETE", record.committed_at_us, run_id, run_facets, job, inputs, [complete_output]),
    ]


def check_unfinished_event_type(event_type: str) -> None:
    """Raise ValueError unless ``event_type`` ends a write that did not commit (FAIL, ABORT)."""
    if event_type not in ("FAIL", "ABORT"):
        raise ValueError(f"a write that did not commit ends with FAIL or ABORT, not {event_type!r}")


def build_failure_events(
    settings: LineageSettings,
    *,
    run_id: str,
    namespace: tuple[str, ...],
    table: str,
    operation: str,
    error: str,
    started_at_us: int,
    failed_at_us: int,
    principal: str | None = None,
    extra: dict[str, Any] | None = None,
    columns_of: Callable[[str], list[str] | None] = lambda _name: None,
    event_type: str = "FAIL",
) -> list[dict[str, Any]]:
    """The ``START`` and ``FAIL`` events of a write that was refused or failed (``event_type``
    ``ABORT``: of a write the client cancelled or abandoned)."""
    check_unfinished_event_type(event_type)
    extra = extra or {}
    qualified = ".".join((*namespace, table))
    job = _job(settings, operation, qualified, extra)
    message = redact_text(error)
    if settings.hash_names:
        message = message.replace(qualified, settings.dataset_name(qualified))
    run_facets = _run_facets(settings)
    failure: dict[str, Any] = {"_producer": PRODUCER, "_schemaURL": ICEFLOE_FACET_SCHEMA, "operation": operation}
    if principal is not None:
        failure["principal"] = principal
    run_facets[ICEFLOE_FACET] = failure
    fail_facets = {**run_facets, "errorMessage": facet("errorMessage", message=message, programmingLanguage="PYTHON")}
    inputs_named = [i for i in extra.get("inputs") or [] if isinstance(i, str)]
    sql = extra.get("sql")
    if isinstance(sql, str) and sql:
        for name in sql_lineage.analyze(sql, qualified, [], columns_of).inputs:
            if name not in inputs_named:
                inputs_named.append(name)
    inputs = [
        {"namespace": settings.namespace, "name": settings.dataset_name(n)} for n in inputs_named if n != qualified
    ]
    inputs.extend(_external_inputs(extra))
    outputs = [{"namespace": settings.namespace, "name": settings.dataset_name(qualified)}]
    start_us = min(started_at_us, failed_at_us)
    return [
        _event("START", start_us, run_id, run_facets, job, inputs, outputs),
        _event(event_type, failed_at_us, run_id, fail_facets, job, inputs, outputs),
    ]


def _external_inputs(extra: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for item in extra.get("input_datasets") or []:
        if isinstance(item, dict) and isinstance(item.get("namespace"), str) and isinstance(item.get("name"), str):
            found.append({"namespace": item["namespace"], "name": item["name"]})
    return found
