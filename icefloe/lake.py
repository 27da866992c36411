"""``Lake``, ``Table`` and ``Scan``: the API users hold, the same over both backends."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from flight_server.cli.client import CommitEvent
from icefloe.backend import AppendEvent, Backend, ScanSource
from icefloe.errors import InvalidArgument

COMMIT_COLUMNS = ("_seq", "_snapshot_id", "_operation")


class Scan:
    """The rows of one table snapshot, as an Arrow PyCapsule stream (``__arrow_c_stream__``).

    polars (``pl.from_arrow(scan)``, ``pl.DataFrame(scan)``), DuckDB (``duckdb.sql("FROM
    scan")``) and pyarrow (``pa.table(scan)``) consume it batch by batch without a copy
    (see ``__arrow_c_stream__`` for the view types strings may come as).
    The scan is pinned when it is made: every read returns the same rows, whatever is
    committed meanwhile.
    """

    def __init__(self, source: ScanSource) -> None:
        self._source = source

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the rows."""
        return self._source.schema

    def to_reader(self) -> pa.RecordBatchReader:
        """A new ``pyarrow.RecordBatchReader`` streaming the rows.

        Raises:
            CursorExpired: The pinned snapshot's files are no longer kept.
        """
        return self._source.open()

    def to_table(self) -> pa.Table:
        """All rows in one ``pyarrow.Table``."""
        return self.to_reader().read_all()

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow C stream of the rows (the PyCapsule protocol).

        Without a ``requested_schema``, string and binary columns that the data files store
        dictionary-coded are sent as ``string_view`` / ``binary_view``: the same values,
        gathered from the dictionary instead of decoded, in the form polars and DuckDB hold
        strings themselves (polars reads them without a copy). ``schema``, ``to_reader`` and
        ``to_table`` keep the plain types; a consumer that asks for a schema gets that.
        """
        if requested_schema is not None:
            return self.to_reader().__arrow_c_stream__(requested_schema)
        return self._source.open_exchange().__arrow_c_stream__()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return iter(self.to_reader())


def _plain(typ: pa.DataType) -> pa.DataType:
    """View types (polars' strings) as the offset types Iceberg's writers take."""
    if pa.types.is_string_view(typ):
        return pa.large_string()
    if pa.types.is_binary_view(typ):
        return pa.large_binary()
    if pa.types.is_list_view(typ) or pa.types.is_large_list_view(typ) or pa.types.is_list(typ) \
            or pa.types.is_large_list(typ):
        return pa.large_list(typ.value_field.with_type(_plain(typ.value_type)))
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(_plain(f.type)) for f in typ])
    return typ


def as_reader(data: Any) -> pa.RecordBatchReader:
    """Any Arrow PyCapsule producer (stream or array) as a ``RecordBatchReader``.

    Raises:
        InvalidArgument: ``data`` implements neither ``__arrow_c_stream__`` nor ``__arrow_c_array__``.
    """
    if isinstance(data, pa.RecordBatchReader):
        reader = data
    elif hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
    elif hasattr(data, "__arrow_c_array__"):
        batch = pa.record_batch(data)
        reader = pa.RecordBatchReader.from_batches(batch.schema, [batch])
    else:
        raise InvalidArgument(
            f"append takes Arrow data (an object with __arrow_c_stream__ or __arrow_c_array__), "
            f"not {type(data).__name__}"
        )
    plain = pa.schema([f.with_type(_plain(f.type)) for f in reader.schema], metadata=reader.schema.metadata)
    return reader if plain == reader.schema else reader.cast(plain)


class Table:
    """One table of a lake: a source (scan, changes, subscribe) and a sink (append)."""

    def __init__(self, backend: Backend, name: str, schema: pa.Schema | None = None) -> None:
        self._backend = backend
        self.name = name
        self._opened_schema = schema  # as of lake.table() / create_table(), for the repr only

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def schema(self) -> pa.Schema:
        """The table's current Arrow schema."""
        return self._backend.table_schema(self.name)

    def scan(self, columns: Sequence[str] | None = None, filter: str | None = None,
             snapshot_id: int | None = None) -> Scan:
        """Plan a scan; the result streams as Arrow.

        Args:
            columns: Columns to return, in this order (None: all).
            filter: A SQL boolean expression over the columns, e.g. ``"v > 10"`` (DuckDB dialect).
            snapshot_id: Read this snapshot instead of the current one.

        Returns:
            A ``Scan`` pinned to the snapshot.

        Raises:
            NotFound: The table or snapshot does not exist.
            InvalidArgument: An unknown column or a bad filter.
        """
        if isinstance(columns, str):
            raise InvalidArgument("columns is a list of column names")
        return Scan(self._backend.scan(self.name, list(columns) if columns is not None else None, filter,
                                       snapshot_id))

    def append(self, data: Any, idempotency_key: str | None = None, schema_policy: str | None = None) -> AppendEvent:
        """Append rows in one durable commit.

        Args:
            data: Anything with ``__arrow_c_stream__`` or ``__arrow_c_array__`` (pyarrow tables,
                batches and readers, polars frames, DuckDB relations, a ``Scan``).
            idempotency_key: A retry with the same key commits nothing new and returns the
                first commit's event (``duplicate`` true).
            schema_policy: ``"evolve"`` lets this append add new columns and widen existing
                ones; ``"match"`` (the default, unless the table's ``icefloe.schema-policy``
                says otherwise) requires the data to fit the table (narrower types are cast
                up, missing nullable columns are nulls); ``"strict"`` requires exactly the
                table's columns and types.

        Returns:
            The commit's event (``rows``: this append's rows).

        Raises:
            NotFound: The table does not exist.
            InvalidArgument: The data does not fit the table's schema, or not Arrow data.
            Conflict: The commit kept losing races.
            PermissionDenied: Not allowed (``ReadOnly`` in-process beside a running server).
        """
        return self._backend.append(self.name, as_reader(data), idempotency_key, schema_policy=schema_policy)

    def subscribe(self, after: int | str = "latest", stop: threading.Event | None = None) -> Iterator[CommitEvent]:
        """Every later commit of this table, live, exactly once and in order.

        Resume after a restart by passing the last ``seq`` seen as ``after``.

        Args:
            after: A commit seq, ``"earliest"`` or ``"latest"``.
            stop: Set it (from another thread) to end the iteration.

        Raises:
            CursorExpired: ``after`` is older than the retained commit log.
            NotFound: The table does not exist.
        """
        return self._backend.subscribe(self.name, after, stop)

    def changes(self, after: int, until: int | None = None) -> pa.RecordBatchReader:
        """The rows appended by this table's commits with seq in ``(after, until]``.

        Args:
            after: Exclusive start seq.
            until: Inclusive end seq (None: the lake's latest commit).

        Returns:
            A reader of the table's columns plus ``_seq``, ``_snapshot_id``, ``_operation``.

        Raises:
            CursorExpired: The range is older than the retained log or its rows are gone.
            InvalidArgument: ``until`` is past the latest commit or before ``after``.
            NotFound: The table does not exist.
        """
        return self._backend.changes(self.name, after, self._backend.head() if until is None else until)

    def __repr__(self) -> str:
        # No I/O in a repr: the columns are the ones the table had when it was opened.
        columns = ""
        if self._opened_schema is not None:
            shown = [f"{f.name} {f.type}{'' if f.nullable else ' not null'}" for f in self._opened_schema]
            if len(shown) > 12:
                shown = [*shown[:12], f"... {len(shown) - 12} more"]
            columns = f", columns: {', '.join(shown)}"
        return f"icefloe.Table({self.name!r}{columns}; {self._backend.describe()})"


class Lake:
    """A set of namespaces and tables, in-process (``icefloe.open``) or remote (``icefloe.connect``)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @property
    def backend(self) -> Backend:
        return self._backend

    def create_namespace(self, namespace: str) -> None:
        """Create a namespace.

        Raises:
            AlreadyExists: It exists.
            InvalidArgument: A bad name.
            PermissionDenied: Not allowed.
        """
        self._backend.create_namespace(namespace)

    def create_table(self, name: str, schema: pa.Schema) -> Table:
        """Create an empty table ``ns.t`` with an Arrow schema.

        Raises:
            AlreadyExists: The table exists.
            NotFound: The namespace does not exist.
            InvalidArgument: A bad name or schema.
            PermissionDenied: Not allowed.
        """
        if not isinstance(schema, pa.Schema):
            raise InvalidArgument("schema must be a pyarrow.Schema")
        created = self._backend.create_table(name, schema)
        return Table(self._backend, name, created)

    def table(self, name: str) -> Table:
        """An existing table.

        Raises:
            NotFound: It does not exist.
        """
        return Table(self._backend, name, self._backend.table_schema(name))

    def head(self) -> int:
        """The seq of the lake's latest commit."""
        return self._backend.head()

    def close(self) -> None:
        self._backend.close()

    def __repr__(self) -> str:
        return f"icefloe.Lake({self._backend.describe()})"

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
