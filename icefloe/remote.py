"""The remote backend: an icefloe server over Arrow Flight / Flight SQL (``icefloe.connect``).

Only the server's public contracts are used (DESIGN.md): Flight SQL statements for DDL, scans
and metadata tables; ``CommandStatementIngest`` to create a table from an Arrow schema; plain
DoPut on a path descriptor for appends (``x-icefloe-idempotency-key``, ``x-icefloe-pipe``);
change scans on a JSON command descriptor; the ``commits.v1`` feed for subscriptions and commit
events. A scan that answers several endpoints is read on one thread per endpoint.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

# Only light modules here (pyarrow, the wire protocol): a thin client must not import the
# catalog, pyiceberg, DuckDB or pandas (tests/icefloe/test_thin_client.py holds it to that).
from catalog.key_rules import check_key
from flight_server.cli.client import CommitEvent, FeedCursorExpired, FeedError, feed_head, subscribe
from flight_server.flightsql import protocol as p
from flight_server.security.headers import IDEMPOTENCY_HEADER, PIPE_HEADER, SCHEMA_POLICIES, SCHEMA_POLICY_HEADER
from icefloe.backend import AppendEvent, Backend, ScanSource, append_event
from icefloe.errors import CursorExpired, Error, InvalidArgument, NotFound, Unauthenticated, from_remote

if TYPE_CHECKING:
    from catalog.pipes import PipeCommit

T = TypeVar("T")
_END = object()
QUEUE_BATCHES = 8  # per scan: bounded, so a slow consumer holds back the endpoint readers


_FLIGHT_SQL_KEYS = b"ARROW:FLIGHT:SQL:"


def _plain_field(field: pa.Field) -> pa.Field:
    kept = {k: v for k, v in (field.metadata or {}).items() if not k.startswith(_FLIGHT_SQL_KEYS)}
    return field.with_metadata(kept) if kept else field.remove_metadata()


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """The schema without Flight SQL's column metadata (``ARROW:FLIGHT:SQL:*``, nine keys per
    column: catalog, schema, table, SQL type name, ...): it is for SQL tools, and printed it buries
    the columns; the API's schemas are the in-process ones. Other metadata stays."""
    if not any(f.metadata and any(k.startswith(_FLIGHT_SQL_KEYS) for k in f.metadata) for f in schema):
        return schema
    return pa.schema([_plain_field(f) for f in schema], metadata=schema.metadata)


def quote(name: str) -> str:
    """A SQL identifier, double-quoted (as the server's engine quotes)."""
    return '"' + name.replace('"', '""') + '"'


def _table_sql(name: str) -> str:
    namespace, _, table = name.rpartition(".")
    if not namespace:
        raise InvalidArgument(f"a table is named ns.table, not {name!r}")
    return f"{quote(namespace)}.{quote(table)}"


class RemoteScan(ScanSource):
    """A planned Flight SQL query; its tickets pin the snapshot, so every ``open`` reads the same rows."""

    def __init__(self, backend: RemoteBackend, info: flight.FlightInfo) -> None:
        self._backend = backend
        self._info = info

    @property
    def schema(self) -> pa.Schema:
        return plain_schema(self._info.schema)

    def open(self) -> pa.RecordBatchReader:
        # Lazy, as in-process: a stream opened only for its schema starts no DoGet.
        def batches() -> Iterator[pa.RecordBatch]:
            yield from self._backend.read_endpoints(self._info)

        return pa.RecordBatchReader.from_batches(self.schema, batches())


class RemoteBackend(Backend):
    """A lake served by an icefloe server."""

    def __init__(self, uri: str, token: str | None = None, user: str | None = None, password: str | None = None,
                 tls_root_certs: bytes | str | Path | None = None) -> None:
        self.uri = uri
        self._roots = tls_root_certs if isinstance(tls_root_certs, bytes) or tls_root_certs is None \
            else Path(tls_root_certs).read_bytes()
        try:
            self._client = flight.FlightClient(uri, tls_root_certs=self._roots)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise InvalidArgument(f"{uri!r} is not a server location (grpc://HOST:PORT or grpc+tls://HOST:PORT): "
                                  f"{exc}") from None
        if token is not None and user is not None:
            raise InvalidArgument("give a token or a user and password, not both")
        if user is not None:
            if password is None:
                raise InvalidArgument("a user needs a password")
            try:
                _, value = self._client.authenticate_basic_token(user, password)
            except pa.ArrowNotImplementedError:
                raise Unauthenticated("the server has no logins (it runs without --users): connect without one") \
                    from None
            except pa.ArrowException as exc:
                raise from_remote(exc) from None
            token = bytes(value).decode("ascii", "replace").partition(" ")[2]
        self.headers: list[tuple[bytes, bytes]] = [(b"authorization", f"Bearer {token}".encode())] if token else []
        self._fleet: dict[str, flight.FlightClient] = {}
        self._fleet_lock = threading.Lock()

    def describe(self) -> str:
        return f"remote {self.uri}"

    def _options(self, extra: Sequence[tuple[bytes, bytes]] = ()) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=[*self.headers, *extra])

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (flight.FlightError, pa.ArrowException) as exc:
            raise from_remote(exc) from None

    # -- Flight SQL helpers -------------------------------------------------------------

    def _info(self, command: bytes) -> flight.FlightInfo:
        return self._call(lambda: self._client.get_flight_info(flight.FlightDescriptor.for_command(command),
                                                               self._options()))

    def _query(self, sql: str) -> pa.Table:
        info = self._info(p.CommandStatementQuery(query=sql).pack())
        return self.read_endpoints(info).read_all()

    def _update(self, sql: str) -> None:
        descriptor = flight.FlightDescriptor.for_command(p.CommandStatementUpdate(query=sql).pack())

        def run() -> None:
            writer, reader = self._client.do_put(descriptor, pa.schema([]), self._options())
            writer.done_writing()
            reader.read()
            writer.close()

        self._call(run)

    def read_endpoints(self, info: flight.FlightInfo) -> pa.RecordBatchReader:
        """The rows of every endpoint; several endpoints are read in parallel, one thread each."""
        endpoints = list(info.endpoints)
        if len(endpoints) == 1:
            stream = self._call(lambda: self._client_for(endpoints[0]).do_get(endpoints[0].ticket, self._options()))
            return self._mapped_reader(info.schema, iter(stream.to_reader()))
        batches: queue.Queue[Any] = queue.Queue(QUEUE_BATCHES)
        stop = threading.Event()

        def read(endpoint: flight.FlightEndpoint) -> None:
            try:
                for chunk in self._client_for(endpoint).do_get(endpoint.ticket, self._options()):
                    while not stop.is_set():
                        try:
                            batches.put(chunk.data, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                batches.put(_END)
            except BaseException as exc:  # handed to the consumer, which raises it
                batches.put(exc)

        threads = [threading.Thread(target=read, args=(e,), daemon=True, name="icefloe-scan") for e in endpoints]
        for thread in threads:
            thread.start()

        def merged() -> Iterator[pa.RecordBatch]:
            ended = 0
            try:
                while ended < len(threads):
                    item = batches.get()
                    if item is _END:
                        ended += 1
                    elif isinstance(item, BaseException):
                        raise item
                    else:
                        yield item
            finally:
                stop.set()

        return self._mapped_reader(info.schema, merged())

    def _mapped_reader(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> pa.RecordBatchReader:
        def mapped() -> Iterator[pa.RecordBatch]:
            try:
                yield from batches
            except (flight.FlightError, pa.ArrowException) as exc:
                raise from_remote(exc) from None

        return pa.RecordBatchReader.from_batches(plain_schema(schema), mapped())

    def _client_for(self, endpoint: flight.FlightEndpoint) -> flight.FlightClient:
        if not endpoint.locations:
            return self._client  # "this server"
        location = endpoint.locations[0].uri.decode()
        with self._fleet_lock:
            if location not in self._fleet:  # --advertise-uri: another server of the fleet
                self._fleet[location] = flight.FlightClient(location, tls_root_certs=self._roots)
            return self._fleet[location]

    # -- Backend ----------------------------------------------------------------------------

    def create_namespace(self, namespace: str) -> None:
        if not isinstance(namespace, str):
            raise InvalidArgument("a namespace is a dotted string")
        self._update(f"CREATE SCHEMA {quote(namespace)}")

    def _namespace_exists(self, namespace: str) -> bool:
        pattern = namespace.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        info = self._info(p.CommandGetDbSchemas(db_schema_filter_pattern=pattern).pack())
        names = self.read_endpoints(info).read_all().column("db_schema_name").to_pylist()
        return namespace in names

    def create_table(self, name: str, schema: pa.Schema) -> pa.Schema:
        namespace, _, table = name.rpartition(".")
        _table_sql(name)
        # Ingest "create" would create a missing namespace; the contract is NOT_FOUND, as in-process.
        if not self._namespace_exists(namespace):
            raise NotFound(f"Namespace does not exist: {namespace}")
        command = p.CommandStatementIngest(
            table_definition_options=p.TableDefinitionOptions(if_not_exist=1, if_exists=1),
            table=table, schema=namespace,
        ).pack()

        def run() -> None:
            writer, reader = self._client.do_put(flight.FlightDescriptor.for_command(command), schema,
                                                 self._options())
            writer.done_writing()
            reader.read()
            writer.close()

        self._call(run)
        return self.table_schema(name)

    def table_schema(self, name: str) -> pa.Schema:
        query = p.CommandStatementQuery(query=f"SELECT * FROM {_table_sql(name)}")
        return plain_schema(self._info(query.pack()).schema)

    def scan(self, name: str, columns: Sequence[str] | None, filter: str | None,
             snapshot_id: int | None) -> ScanSource:
        select = "*" if columns is None else ", ".join(quote(c) for c in columns)
        if columns is not None and not columns:
            raise InvalidArgument("a scan needs at least one column (or None for all)")
        sql = f"SELECT {select} FROM {_table_sql(name)}"
        if snapshot_id is not None:
            if isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int):
                raise InvalidArgument("snapshot_id must be an integer")
            sql += f" AT (VERSION => {snapshot_id})"
        if filter is not None:
            sql += f" WHERE ({filter})"
        return RemoteScan(self, self._info(p.CommandStatementQuery(query=sql).pack()))

    def append(self, name: str, data: pa.RecordBatchReader, idempotency_key: str | None,
               pipe: PipeCommit | None = None, schema_policy: str | None = None) -> AppendEvent:
        namespace, _, table = name.rpartition(".")
        _table_sql(name)
        headers: list[tuple[bytes, bytes]] = []
        if idempotency_key is not None:
            try:
                check_key(idempotency_key)  # the server's rule, checked before gRPC refuses the header
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
            headers.append((IDEMPOTENCY_HEADER.encode(), idempotency_key.encode("utf-8")))
        if pipe is not None:
            headers.append((PIPE_HEADER.encode(), pipe.to_json().encode("utf-8")))
        if schema_policy is not None:
            if not isinstance(schema_policy, str) or schema_policy.strip().lower() not in SCHEMA_POLICIES:
                raise InvalidArgument(
                    f"schema_policy must be one of {', '.join(SCHEMA_POLICIES)}, not {schema_policy!r}")
            headers.append((SCHEMA_POLICY_HEADER.encode(), schema_policy.strip().lower().encode()))
        descriptor = flight.FlightDescriptor.for_path(*namespace.split("."), table)

        def run() -> dict[str, Any]:
            writer, reader = self._client.do_put(descriptor, data.schema, self._options(headers))
            try:
                for batch in data:
                    writer.write_batch(batch)
                writer.done_writing()
                answer = reader.read()
            finally:
                writer.close()
            result: dict[str, Any] = json.loads(answer.to_pybytes())
            return result

        result = self._call(run)
        event = None
        if result["rows"] or result.get("duplicate"):
            event = self._event_at(name, int(result["commit_seq"]))
        return append_event(name, result, event)

    def _event_at(self, name: str, seq: int) -> CommitEvent | None:
        """The feed's event of commit ``seq`` (None once the log no longer holds it)."""
        stop = threading.Event()
        try:
            for event in subscribe(self.uri, after=seq - 1, tables=[name], headers=self.headers, stop=stop,
                                   reconnect=False, tls_root_certs=self._roots):
                stop.set()
                return event if event.seq == seq else None
        except FeedCursorExpired:
            return None
        except (FeedError, ConnectionError, pa.ArrowException) as exc:
            raise self._feed_error(exc) from None
        return None

    @staticmethod
    def _feed_error(exc: BaseException) -> Error:
        if isinstance(exc, FeedCursorExpired):
            return CursorExpired(str(exc))
        cause = exc.__cause__ if isinstance(exc, FeedError) and exc.__cause__ is not None else exc
        return from_remote(cause)

    def subscribe(self, name: str, after: int | str, stop: threading.Event | None) -> Iterator[CommitEvent]:
        _table_sql(name)
        self.table_schema(name)  # a mistyped name fails now, as in-process
        try:
            yield from subscribe(self.uri, after=after, tables=[name], headers=self.headers, stop=stop,
                                 tls_root_certs=self._roots)
        except (FeedError, pa.ArrowException) as exc:
            raise self._feed_error(exc) from None

    def changes(self, name: str, after: int, until: int) -> pa.RecordBatchReader:
        _table_sql(name)
        command = json.dumps({"changes": name, "after": after, "until": until}).encode()
        return self.read_endpoints(self._info(command))

    def head(self) -> int:
        try:
            return feed_head(self.uri, self.headers, self._roots)
        except (FeedError, ConnectionError, pa.ArrowException) as exc:
            raise self._feed_error(exc) from None

    def snapshot_summaries(self, name: str) -> list[Mapping[str, str]]:
        namespace, _, table = name.rpartition(".")
        _table_sql(name)
        rows = self._query(f"SELECT summary FROM {quote(namespace)}.{quote(table + '$snapshots')}")
        return [dict(summary or []) for summary in rows.column("summary").to_pylist()]

    def close(self) -> None:
        for client in [self._client, *self._fleet.values()]:
            client.close()
