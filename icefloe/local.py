"""The in-process backend: ``catalog.RocksCatalog`` in this process (``icefloe.open``).

Scans (``icefloe.local_scan``) stream straight from the snapshot's Parquet files. Appends go through
``catalog.append.Appender`` (the server's own commit path), change scans through
``flight_server.changes.read_changes`` and subscriptions through the catalog's ``CommitHub``,
which reads the durable log whenever it is behind: beside a running server (the catalog is
then read-only) every commit the server lands is seen from the log.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from catalog import RocksCatalog
from catalog.append import Appender
from catalog.commit_log import CommitRecord
from catalog.pipes import PipeCommit
from flight_server.changes import ChangeRequest, read_changes
from flight_server.cli.client import CommitEvent, events_of
from flight_server.engine.iceberg_source import IcebergSources
from flight_server.engine.quality import DuckDBQualityGate
from flight_server.feed.events import records_to_batch
from icefloe.backend import AppendEvent, Backend, ScanSource, append_event
from icefloe.errors import InvalidArgument, NotFound, from_local
from icefloe.local_scan import FooterCache, LocalScan

T = TypeVar("T")
POLL_S = 0.2  # how long a subscription waits for an in-process publish before re-reading the log


def _mapped(fn: Callable[..., T]) -> Callable[..., T]:
    """Every exception of the catalog leaves as an ``icefloe.Error``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            mapped = from_local(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    return wrapper


def _identifier(name: str) -> tuple[str, ...]:
    if not isinstance(name, str) or "." not in name:
        raise InvalidArgument(f"a table is named ns.table, not {name!r}")
    return tuple(name.split("."))


class LocalBackend(Backend):
    """A lake in this process. Read-only while another process (a server) holds the warehouse."""

    def __init__(self, warehouse: str, read_only: bool | None = None,
                 properties: Mapping[str, str] | None = None) -> None:
        # properties: further RocksCatalog properties (catalog-path, object-store FileIO settings).
        props = {**(properties or {}), "warehouse": str(warehouse)}
        if read_only is not None:
            props["read-only"] = "true" if read_only else "false"
        try:
            self.catalog = RocksCatalog("icefloe", **props)
        except Exception as exc:
            raise from_local(exc) from exc
        self._appender: Appender | None = None
        self._sources = IcebergSources()
        self._footers = FooterCache()

    def describe(self) -> str:
        return f"in-process {self.catalog.warehouse}" + (", read-only" if self.read_only else "")

    @property
    def read_only(self) -> bool:
        return self.catalog.read_only

    @property
    def appender(self) -> Appender:
        if self._appender is None:
            self._appender = Appender(self.catalog)
            self._appender.quality_gate = DuckDBQualityGate()
        return self._appender

    def _table(self, name: str) -> Table:
        return self.catalog.load_table(_identifier(name))

    @_mapped
    def create_namespace(self, namespace: str) -> None:
        self.catalog.create_namespace(namespace)

    @_mapped
    def create_table(self, name: str, schema: pa.Schema) -> pa.Schema:
        self.catalog.create_table(_identifier(name), schema)
        return self.table_schema(name)

    @_mapped
    def table_schema(self, name: str) -> pa.Schema:
        schema: pa.Schema = self._table(name).schema().as_arrow()
        return schema

    @_mapped
    def scan(self, name: str, columns: Sequence[str] | None, filter: str | None,
             snapshot_id: int | None) -> ScanSource:
        return LocalScan(self._sources, self._footers, self._table(name), columns, filter, snapshot_id)

    @_mapped
    def append(self, name: str, data: pa.RecordBatchReader, idempotency_key: str | None,
               pipe: PipeCommit | None = None, schema_policy: str | None = None) -> AppendEvent:
        self.catalog.check_writable()  # before any file is written
        result = self.appender.append_stream(
            _identifier(name), data.schema, data, idempotency_key=idempotency_key,
            snapshot_properties=pipe.snapshot_properties() if pipe else None,
            extra=pipe.commit_extra() if pipe else None,
            schema_policy=_policy(schema_policy),
        )
        record = self.catalog.log.get(result.commit_seq) if result.rows or result.duplicate else None
        return append_event(name, result.to_json(), _event(record) if record is not None else None)

    def subscribe(self, name: str, after: int | str, stop: threading.Event | None) -> Iterator[CommitEvent]:
        try:
            namespace, table = _identifier(name)[:-1], _identifier(name)[-1]
            self._table(name)
            log = self.catalog.log
            start = log.log_start() - 1 if after == "earliest" else log.head() if after == "latest" else after
            if isinstance(start, bool) or not isinstance(start, int) or start < 0:
                raise InvalidArgument(f"after must be a commit seq, 'earliest' or 'latest', not {after!r}")
            subscription = self.catalog.hub.subscribe(start)
        except Exception as exc:
            raise from_local(exc) from exc
        with subscription:
            while stop is None or not stop.is_set():
                try:
                    records = subscription.poll(POLL_S)
                except Exception as exc:
                    raise from_local(exc) from exc
                for record in records:
                    if record.namespace == namespace and record.table == table:
                        yield _event(record)

    @_mapped
    def changes(self, name: str, after: int, until: int) -> pa.RecordBatchReader:
        request = ChangeRequest.parse(json.dumps({"changes": name, "after": after, "until": until}).encode())
        self._table(name)
        return read_changes(self.catalog, request)

    @_mapped
    def head(self) -> int:
        return self.catalog.log.head()

    @_mapped
    def snapshot_summaries(self, name: str) -> list[Mapping[str, str]]:
        try:
            table = self._table(name)
        except NoSuchTableError:
            raise NotFound(f"table {name} does not exist") from None
        return [dict(s.summary.additional_properties) for s in table.metadata.snapshots if s.summary is not None]

    def close(self) -> None:
        self.catalog.close()


def _policy(schema_policy: str | None) -> str | None:
    if schema_policy is None:
        return None
    from catalog.schema_policy import check_policy

    try:
        return check_policy(schema_policy) if isinstance(schema_policy, str) else check_policy(repr(schema_policy))
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def _event(record: CommitRecord) -> CommitEvent:
    return next(events_of(records_to_batch([record])))
