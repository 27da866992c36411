"""icefloe's own SQL statements: change scans and staged-append commits for SQL-only clients.

ADBC, JDBC and other stock Flight SQL clients send SQL text only: they cannot send the JSON
change-scan descriptor or a DoAction, and ADBC bulk ingest answers a row count, not a staging
token. These statements give them the same primitives (DESIGN.md, "Change scans" and
"Two-phase appends"), with the same checks and answers:

    SELECT * FROM icefloe.changes('ns.t', after => S1, until => S2 [, include => 'appends' | 'all'])
    CALL icefloe.commit_staged('ns.t', job => 'job-id' [, idempotency_key => 'key'])
    CALL icefloe.commit_staged('ns.t', tokens => ['<staging token>', ...] [, idempotency_key => 'key'])
    CALL icefloe.abort_staged('ns.t', job => 'job-id' | tokens => [...])

(``CALL f(...)`` and ``SELECT * FROM f(...)`` are the same statement, as in DuckDB. The table is
the first argument, unnamed, or named ``"table"`` (quoted: TABLE is an SQL keyword); every value
is a literal or a bound ``?`` parameter.)

- ``icefloe.changes`` answers exactly the change-scan FlightInfo of ``{"changes": "ns.t",
  "after": S1, "until": S2, "include": ...}``: the same endpoints (split by
  ``icefloe.scan.*``), schema and ``app_metadata``; ADBC reads the endpoints as a result set or
  as partitions.
- ``icefloe.commit_staged`` / ``abort_staged`` run ``icefloe.commit-staged`` /
  ``abort-staged`` on the tokens given, or on every staging the caller recorded under ``job``
  (staged with ``x-icefloe-stage: job`` on a DoPut, or on an ADBC bulk ingest through the
  call-header option ``adbc.flight.sql.rpc.call_header.x-icefloe-stage``). Executed as a query,
  the answer is one row, the DoAction's JSON as columns; as an update, its row count.

The statements are recognised on DuckDB's parse tree, never on text: only a statement that
names ``icefloe.<one of these>(`` in its tokens is parsed here, and it must have exactly the
shape above (anything else naming them is refused with the usage, not run).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.flight as flight

from flight_server import errors
from flight_server.changes import ChangeRequest, ChangeScanService
from flight_server.engine.planner import MAX_STATEMENT_BYTES
from flight_server.engine.policy import serialize
from flight_server.message_size import record_batch_stream
from flight_server.security.handles import HandleSigner
from flight_server.staged_appends import table_identifier

if TYPE_CHECKING:
    from flight_server.observability.querylog import QueryLog
    from flight_server.staged_appends import StagedAppendService

PURPOSE = "res"  # the sealed one-row answer of a commit / abort, read back by DoGet
CHANGES, COMMIT, ABORT = "changes", "commit_staged", "abort_staged"
_USAGE = {
    CHANGES: "SELECT * FROM icefloe.changes('ns.t', after => 10, until => 20, include => 'appends')",
    COMMIT: "CALL icefloe.commit_staged('ns.t', job => 'job-id', idempotency_key => 'key') "
            "(or tokens => ['<staging token>', ...] instead of job)",
    ABORT: "CALL icefloe.abort_staged('ns.t', job => 'job-id') (or tokens => [...] instead of job)",
}
_ARGUMENTS = {
    CHANGES: ("table", "after", "until", "include"),
    COMMIT: ("table", "job", "tokens", "idempotency_key"),
    ABORT: ("table", "job", "tokens"),
}
COMMIT_SCHEMA = pa.schema([
    pa.field("table", pa.utf8(), nullable=False),
    pa.field("commit_seq", pa.int64()),
    pa.field("snapshot_id", pa.int64()),
    pa.field("rows", pa.int64(), nullable=False),
    pa.field("duplicate", pa.bool_(), nullable=False),
])
ABORT_SCHEMA = pa.schema([
    pa.field("table", pa.utf8(), nullable=False),
    pa.field("aborted", pa.int64(), nullable=False),
    pa.field("files", pa.int64(), nullable=False),
])


@dataclass(frozen=True)
class IcefloeCall:
    """One recognised statement: the function and its arguments by name."""

    function: str
    args: dict[str, Any]

    @property
    def writes(self) -> bool:
        return self.function != CHANGES

    @property
    def result_schema(self) -> pa.Schema:
        return COMMIT_SCHEMA if self.function == COMMIT else ABORT_SCHEMA


class _Parser:
    """A private DuckDB connection that only ever parses (``json_serialize_sql``): no table,
    file or setting is reachable through it, and it runs nothing a client wrote."""

    def __init__(self) -> None:
        self._con = duckdb.connect(":memory:", config={"enable_external_access": False,
                                                       "autoload_known_extensions": False})
        self._lock = threading.Lock()

    def tree(self, sql: str) -> dict[str, Any]:
        with self._lock:
            return serialize(self._con, sql)


_PARSER = _Parser()


def recognise(sql: str, params: list[Any] | None = None, bound: bool = True) -> IcefloeCall | None:
    """The icefloe statement ``sql`` is, with ``params`` bound to its ``?`` markers, or None
    when it names none of them (any other SQL: the engine's business). ``bound`` False (a
    statement being prepared): each parameter's value is the ``Parameter`` it stands for.

    Raises:
        errors.InvalidArgument: It names one of them but not in the documented shape, or an
            argument is missing, unknown, repeated or not a literal / parameter.
    """
    if "icefloe" not in sql.lower():  # the common case costs one scan of the text
        return None
    if len(sql.encode("utf-8")) > MAX_STATEMENT_BYTES:
        return None  # the engine refuses it with its own message
    found = _named_function(sql)
    if found is None:
        return None
    function, call_keyword_end = found
    usage = _USAGE[function]
    text = "SELECT * FROM " + sql[call_keyword_end:] if call_keyword_end else sql
    try:
        statement = _PARSER.tree(text)
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"{exc}; usage: {usage}") from None
    node = statement.get("node") or {}
    table_function = node.get("from_table") or {}
    called = table_function.get("function") or {}
    if (
        node.get("type") != "SELECT_NODE"
        or not _only_star(node.get("select_list"))
        or any(node.get(k) for k in ("where_clause", "group_expressions", "group_sets", "having", "qualify",
                                     "sample", "modifiers"))
        or (node.get("cte_map") or {}).get("map")
        or table_function.get("type") != "TABLE_FUNCTION"
        or table_function.get("sample")
        or str(called.get("schema", "")).lower() != "icefloe"
        or called.get("catalog")
        or str(called.get("function_name", "")).lower() != function
        or called.get("distinct") or called.get("filter") or (called.get("order_bys") or {}).get("orders")
    ):
        raise errors.InvalidArgument(f"icefloe.{function}(...) is a statement of its own: {usage}")
    return IcefloeCall(function, _arguments(function, called.get("arguments") or [], params, bound, usage))


def _named_function(sql: str) -> tuple[str, int] | None:
    """(function, end of a leading CALL keyword or 0) when the tokens hold ``icefloe . f (``."""
    tokens = duckdb.tokenize(sql)
    texts = [sql[start:end].strip() for (start, _), end in
             zip(tokens, [t[0] for t in tokens[1:]] + [len(sql)], strict=True)]
    for i in range(len(tokens) - 3):
        if (tokens[i][1] == duckdb.token_type.identifier and _identifier(texts[i]) == "icefloe"
                and texts[i + 1] == "." and tokens[i + 2][1] == duckdb.token_type.identifier
                and texts[i + 3].startswith("(")):
            name = _identifier(texts[i + 2])
            if name in _USAGE:
                leading_call = tokens[0][1] == duckdb.token_type.keyword and texts[0].upper() == "CALL"
                return name, tokens[1][0] if leading_call else 0
    return None


def _identifier(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"').lower()
    return text.lower()


def _only_star(select_list: Any) -> bool:
    if not isinstance(select_list, list) or len(select_list) != 1:
        return False
    star = select_list[0]
    return (star.get("class") == "STAR" and not star.get("relation_name") and not star.get("columns")
            and not star.get("expr") and not any(star.get(k) for k in
                                                 ("exclude_list", "replace_list", "rename_list",
                                                  "qualified_exclude_list")))


def _arguments(function: str, raw: list[Any], params: list[Any] | None, bound: bool, usage: str) -> dict[str, Any]:
    allowed = _ARGUMENTS[function]
    args: dict[str, Any] = {}
    for position, argument in enumerate(raw):
        name = str(argument.get("name") or "").lower()
        if not name:
            if position != 0:
                raise errors.InvalidArgument(f"only the table may be given without a name; usage: {usage}")
            name = "table"
        if name not in allowed:
            raise errors.InvalidArgument(
                f"icefloe.{function}() has no argument {name!r} (it takes {', '.join(allowed)}); usage: {usage}"
            )
        if name in args:
            raise errors.InvalidArgument(f"argument {name!r} is given twice; usage: {usage}")
        args[name] = _value(argument.get("expression") or {}, params or [], bound, name, usage)
    return args


@dataclass(frozen=True)
class Parameter:
    """A ``?`` marker of a statement being prepared: its 0-based position and Arrow type."""

    position: int
    type: pa.DataType


# What a client binds to each argument (the prepared statement's parameter schema).
_PARAMETER_TYPES = {"after": pa.int64(), "until": pa.int64(), "tokens": pa.list_(pa.utf8())}


def parameter_schema(call: IcefloeCall) -> pa.Schema:
    """The parameter schema of a prepared icefloe statement: one field per ``?``, typed by its argument."""
    found = {v.position: v.type for value in call.args.values()
             for v in (value if isinstance(value, list) else [value]) if isinstance(v, Parameter)}
    return pa.schema([pa.field(f"${i + 1}", found.get(i, pa.utf8())) for i in range(max(found, default=-1) + 1)])


def _value(expr: dict[str, Any], params: list[Any], bound: bool, name: str, usage: str) -> Any:
    """A literal (string, integer, NULL), a list of string literals, or a bound parameter."""
    cls = expr.get("class")
    if cls == "CONSTANT":
        literal = expr.get("literal") or {}
        kind, text = literal.get("kind"), str(literal.get("text", ""))
        if kind == "STRING":
            return text
        if kind == "INTEGER":
            return int(text)
        if kind == "NULL_LITERAL":
            return None
    elif cls == "PARAMETER":
        index = expr.get("identifier")
        position = int(index) - 1 if isinstance(index, (int, str)) and str(index).isdigit() else -1
        if not bound and position >= 0:
            return Parameter(position, pa.utf8() if name == "tokens" else _PARAMETER_TYPES.get(name, pa.utf8()))
        if not 0 <= position < len(params):
            raise errors.InvalidArgument(f"argument {name!r} is a parameter that has no bound value")
        return params[position]
    elif cls == "FUNCTION" and str(expr.get("function_name", "")).lower() == "list_value":
        return [_value((item or {}).get("expression") or {}, params, bound, name, usage)
                for item in expr.get("arguments") or []]
    raise errors.InvalidArgument(f"argument {name!r} must be a literal or a ? parameter; usage: {usage}")


class IcefloeCalls:
    """Plans and answers the statements ``recognise`` finds.

    Args:
        changes: The change-scan service (the same FlightInfo as the JSON command).
        staged: The staged-append service (looked up per call: it is built after this one).
        signer: Seals the one-row answers that DoGet reads back.
        querylog: Commits and aborts are logged as the statements they are.
        table_exists: Whether a table is in the catalog (a precise NOT_FOUND before a job lookup).
    """

    def __init__(self, changes: ChangeScanService, staged: Callable[[], StagedAppendService],
                 signer: HandleSigner, querylog: QueryLog, table_exists: Callable[[tuple[str, ...]], bool]) -> None:
        self._changes = changes
        self._staged = staged
        self._signer = signer
        self._querylog = querylog
        self._table_exists = table_exists

    def change_request(self, call: IcefloeCall) -> ChangeRequest:
        """The change-scan request the statement stands for (validated as the JSON one is)."""
        missing = [n for n in ("table", "after", "until") if n not in call.args]
        if missing:
            raise errors.InvalidArgument(f"icefloe.changes() needs {', '.join(missing)}; usage: {_USAGE[CHANGES]}")
        body = {"changes": call.args["table"], "after": call.args["after"], "until": call.args["until"]}
        if call.args.get("include") is not None:
            body["include"] = call.args["include"]
        return ChangeRequest.parse(json.dumps(body).encode())

    def flight_info(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
                    call: IcefloeCall, sql: str, principal: str | None, target_bytes: int, max_partitions: int,
                    locations: list[flight.Location]) -> flight.FlightInfo:
        """A change scan's FlightInfo, or (commit / abort) run it now and answer its one row."""
        if call.function == CHANGES:
            return self._changes.flight_info(descriptor, self.change_request(call), target_bytes, max_partitions,
                                             locations)
        answer = self.run(context, call, sql, principal)
        ticket = _statement_ticket(self._signer.seal(PURPOSE, json.dumps({"f": call.function, "r": answer}).encode()))
        return flight.FlightInfo(call.result_schema, descriptor, [flight.FlightEndpoint(ticket, locations)], 1, -1)

    def run(self, context: flight.ServerCallContext, call: IcefloeCall, sql: str,
            principal: str | None) -> dict[str, Any]:
        """Commit or abort (the caller authorized ``write``); the answer's JSON, logged."""
        started = time.perf_counter()
        try:
            answer = self._run(context, call, principal)
        except Exception as exc:
            self._querylog.record(sql, principal, started, errors.status_of(exc))
            raise
        self._querylog.record(sql, principal, started, "OK", rows=rows_of(answer))
        return answer

    def _run(self, context: flight.ServerCallContext, call: IcefloeCall, principal: str | None) -> dict[str, Any]:
        usage = _USAGE[call.function]
        table, job, tokens = call.args.get("table"), call.args.get("job"), call.args.get("tokens")
        if not isinstance(table, str):
            raise errors.InvalidArgument(f"icefloe.{call.function}() needs the table as 'ns.t'; usage: {usage}")
        if (job is None) == (tokens is None):
            raise errors.InvalidArgument(f"icefloe.{call.function}() takes either job or tokens; usage: {usage}")
        staged = self._staged()
        if job is not None:
            if not isinstance(job, str):
                raise errors.InvalidArgument(f"job must be a string; usage: {usage}")
            identifier = table_identifier(table)
            if not self._table_exists(identifier):
                raise errors.NotFound(f"table {table} does not exist")
            tokens = staged.job_tokens(identifier, job, context, principal, committed=call.function == COMMIT)
        body: dict[str, Any] = {"table": table, "tokens": tokens}
        if call.function == COMMIT:
            body["idempotency_key"] = call.args.get("idempotency_key")
        return staged.run(context, call.function == COMMIT, body, principal)

    def do_get(self, sealed: bytes) -> flight.RecordBatchStream:
        """The one-row answer sealed at GetFlightInfo (the commit or abort ran there)."""
        raw = json.loads(self._signer.open(PURPOSE, sealed, "ticket"))
        schema = COMMIT_SCHEMA if raw["f"] == COMMIT else ABORT_SCHEMA
        row = {name: raw["r"].get(name) for name in schema.names}
        return record_batch_stream(pa.Table.from_pylist([row], schema))


def rows_of(answer: dict[str, Any]) -> int:
    """An update's count: rows committed, or stagings aborted."""
    return int(answer["rows"]) if "rows" in answer else int(answer.get("aborted", 0))


def _statement_ticket(handle: bytes) -> bytes:
    from flight_server.flightsql import protocol as p

    return p.TicketStatementQuery(handle).pack()


def answers(sealed: bytes) -> bool:
    """Whether a DoGet ticket handle is one of these answers."""
    return sealed.startswith(f"icefloe.{PURPOSE}.".encode())

