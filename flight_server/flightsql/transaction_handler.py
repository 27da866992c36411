"""Flight SQL transactions: ``BeginTransaction`` / ``EndTransaction``, a command's
``transaction_id``, SQL ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` in a session, and ingest inside
a transaction. The transactions themselves live in ``flight_server.transactions``.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.flight as flight

from flight_server import errors
from flight_server.append_streams import read_batches
from flight_server.engine import split_namespace
from flight_server.flightsql import protocol as p
from flight_server.flightsql.sessions import SessionStore
from flight_server.security import roles
from flight_server.security.authorizer import Authorizer
from flight_server.security.headers import call_headers
from flight_server.transactions import ACTIVE, Transaction, TransactionManager

if TYPE_CHECKING:
    from flight_server.appends import AppendService

# The user agent of the one driver whose ingest needs its transaction found by peer (see
# ``adbc_ingest_transaction``).
ADBC_USER_AGENT = "ADBC Flight SQL Driver"
# SQL transaction control; the driver APIs (BeginTransaction / EndTransaction) do the same.
CONTROL = re.compile(
    r"^\s*(BEGIN|START|COMMIT|END|ROLLBACK|ABORT)(\s+(TRANSACTION|WORK))?\s*;?\s*$", re.IGNORECASE
)


# Why a statement after SQL BEGIN is refused when the client drops the session cookie.
COOKIE_DROPPED = (
    "this connection began a transaction with SQL BEGIN, but this call did not send back the session "
    "cookie (arrow_flight_session_id) set on the BEGIN's response, so it cannot run in that transaction; "
    "the transaction was rolled back and nothing of it was committed. Use a client that keeps cookies "
    "(ADBC: adbc.flight.sql.rpc.with_cookie_middleware=true), sign in (bearer token), or use the driver's "
    "transaction API (BeginTransaction / EndTransaction: ADBC autocommit=False)"
)


class UnconfirmedBegins:
    """SQL BEGINs from callers that carried no session identity, until the session is seen again.

    Such a BEGIN is kept in the session of the cookie offered on its own response. A client
    that keeps cookies sends that cookie with its next call, which confirms the session. One
    that drops cookies would run its next statements outside any transaction, silently; so the
    next call from the same gRPC connection (peer) that again carries no identity is refused
    and the transaction rolled back. The peer only ever refuses a call, it never puts one in a
    transaction; a call with some other identity on the same connection (a proxy multiplexing
    clients) is not judged.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._by_peer: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, peer: str, key: str, sealed: bytes) -> None:
        with self._lock:
            self._by_peer[peer] = (key, sealed)
            self._by_peer.move_to_end(peer)
            while len(self._by_peer) > self.limit:
                self._by_peer.popitem(last=False)

    def settle(self, peer: str, presented: str | None) -> bytes | None:
        """The sealed id of the transaction a call from ``peer`` carrying session key
        ``presented`` must be refused for, else None (and a call carrying the BEGIN's session
        confirms it)."""
        if not self._by_peer:
            return None  # the common case, without the lock
        with self._lock:
            entry = self._by_peer.get(peer)
            if entry is None or (presented is not None and presented != entry[0]):
                return None
            del self._by_peer[peer]
            return entry[1] if presented is None else None

    def __len__(self) -> int:
        return len(self._by_peer)


class TransactionHandler:
    """Runs calls inside the transaction they name (or their session's), and the commands that
    begin and end transactions."""

    def __init__(self, transactions: TransactionManager, sessions: SessionStore, authorizer: Authorizer) -> None:
        self.transactions = transactions
        self.sessions = sessions
        self.authorizer = authorizer
        self.unconfirmed = UnconfirmedBegins()

    def _refuse_dropped_cookie(self, context: flight.ServerCallContext) -> None:
        """Refuse (and roll back) when this connection began a transaction with SQL BEGIN
        and this call came without the session it was kept in (see ``UnconfirmedBegins``)."""
        sealed = self.unconfirmed.settle(context.peer(), self.sessions.presented_key(context))
        if sealed is None:
            return
        with contextlib.suppress(errors.IcefloeError):
            self.transactions.rollback(sealed, self.authorizer.principal_name(context))
        raise errors.FailedPrecondition(COOKIE_DROPPED)

    @contextlib.contextmanager
    def inside(self, context: flight.ServerCallContext, sealed: bytes | None,
               sql: str | None) -> Iterator[Transaction | None]:
        """Run the block inside the transaction ``sealed`` names, else the session's (SQL BEGIN),
        else none. Transaction control statements run outside (they begin / end it)."""
        if sql is not None and CONTROL.match(sql):
            if sealed:
                raise errors.FailedPrecondition(
                    "this statement controls transactions, but it was sent inside one the driver manages; "
                    "use the driver's commit() / rollback() (EndTransaction)"
                )
            yield None
            return
        if not sealed:
            self._refuse_dropped_cookie(context)
            session = self.sessions.get(context)
            sealed = session.transaction if session is not None else None
        if not sealed:
            yield None
            return
        principal = self.authorizer.principal_name(context)
        with self.transactions.using(sealed, principal) as txn:
            token = ACTIVE.set(txn)
            try:
                yield txn
            finally:
                ACTIVE.reset(token)

    def control(self, context: flight.ServerCallContext, sql: str) -> None:
        """SQL ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``: a transaction of the caller's session."""
        verb = sql.strip().split()[0].rstrip(";").upper()
        principal = self.authorizer.principal_name(context)
        self._refuse_dropped_cookie(context)
        if verb in ("BEGIN", "START"):
            self.authorizer.authorize(context, roles.action_role("BeginTransaction"))
            session = self.sessions.get(context, create=True)
            if session is None:
                raise errors.FailedPrecondition(
                    "BEGIN needs a session (a bearer token or the session cookie) to keep the transaction in; "
                    "use the driver's transaction API (autocommit off) instead"
                )
            if session.transaction is not None:
                with contextlib.suppress(errors.IcefloeError):
                    self.transactions.get(session.transaction, principal)
                    raise errors.FailedPrecondition("a transaction is already open in this session; "
                                                    "COMMIT or ROLLBACK it first")
            session.transaction = self.transactions.begin(principal)  # (no peer: bound to the session)
            key = self.sessions.key(context)
            if self.sessions.presented_key(context) is None and key is not None:
                self.unconfirmed.add(context.peer(), key, session.transaction)
            return
        self.authorizer.authorize(context, roles.action_role("EndTransaction"))
        session = self.sessions.get(context)
        sealed = session.transaction if session is not None else None
        if sealed is None:
            # Statements the client believed were in a transaction ran on their own: say so,
            # rather than answer as if the COMMIT / ROLLBACK had done what was asked.
            raise errors.FailedPrecondition(
                f"{verb} outside a transaction: no transaction is open in this session (no BEGIN in it, or it "
                "already ended), so nothing was committed or rolled back by it; statements outside a "
                "transaction commit on their own. SQL BEGIN keeps its transaction in the session: the "
                "client must send back the session cookie (arrow_flight_session_id) or a bearer token"
            )
        assert session is not None
        session.transaction = None
        if verb in ("COMMIT", "END"):
            self.transactions.commit(sealed, principal)
        else:
            self.transactions.rollback(sealed, principal)

    def begin(self, context: flight.ServerCallContext) -> bytes:
        principal = self.authorizer.authorize(context, roles.action_role("BeginTransaction"))
        sealed = self.transactions.begin(principal, peer=context.peer())
        return p.ActionBeginTransactionResult(transaction_id=sealed).pack()

    def end(self, context: flight.ServerCallContext, req: p.ActionEndTransactionRequest) -> None:
        principal = self.authorizer.authorize(context, roles.action_role("EndTransaction"))
        if not req.transaction_id:
            raise errors.InvalidArgument("EndTransaction needs a transaction_id")
        if req.action == p.END_TRANSACTION_COMMIT:
            self.transactions.commit(req.transaction_id, principal)
        elif req.action == p.END_TRANSACTION_ROLLBACK:
            self.transactions.rollback(req.transaction_id, principal)
        else:
            raise errors.InvalidArgument("EndTransaction action must be END_TRANSACTION_COMMIT or _ROLLBACK")

    def adbc_ingest_transaction(self, context: flight.ServerCallContext) -> bytes | None:
        """The transaction an ADBC connection's ingest belongs to.

        The ADBC Flight SQL driver (Go, 1.13) begins a transaction when autocommit is off and
        sends its id with statements, but not with ``adbc_ingest``: without this, an ingest
        would land at once and a rollback would keep it. Its calls come over the connection's
        own gRPC channel, so the transaction that channel (peer address) began, for the same
        user, is the one it means. Only for that driver (by its user agent): other clients
        send the id they mean.
        """
        agents = call_headers(context, "user-agent")
        if not agents or not agents[-1].startswith(ADBC_USER_AGENT):
            return None
        return self.transactions.by_peer(context.peer(), self.authorizer.principal_name(context))


def is_data_change(sql: str, txn: Transaction, default_schema: tuple[str, ...] | None) -> bool:
    """True for a data change (staged in the transaction); False for DDL, which is not part of
    a transaction: it lands at once, as with autocommit (SqlInfo says DDL neither commits the
    transaction nor is ignored). ADBC connections are in a transaction whenever autocommit is
    off, so refusing DDL there would refuse it to every default DB-API connection. DDL on a
    table the transaction wrote is refused: it would change what the staged writes are based on.
    """
    from sqlglot import exp

    from flight_server.sqlwrite.parse import parse, table_name

    tree = parse(sql)
    if isinstance(tree, (exp.Insert, exp.Delete, exp.Update, exp.TruncateTable)):
        return True
    nodes = list(tree.args.get("tables") or []) + [tree.this]
    for node in nodes:
        node = node.this if isinstance(node, exp.Schema) else node
        if not isinstance(node, exp.Table):
            continue
        try:
            target = tuple(table_name(node, default_schema).identifier)
        except errors.IcefloeError:
            continue  # the DDL handler names the bad name itself
        if target in txn.tables:
            raise errors.FailedPrecondition(
                f"table {'.'.join(target)} has uncommitted writes in this transaction; COMMIT or ROLLBACK "
                "before changing or dropping it"
            )
    return False


def transactional_ingest(appends: AppendService, context: flight.ServerCallContext, cmd: p.CommandStatementIngest,
                         namespace: tuple[str, ...], reader: Any, catalog: Any, implicit: bool) -> int | None:
    """``adbc_ingest`` inside a transaction: the rows are staged in it (appends to existing
    tables). An ingest that creates or replaces a table is DDL: refused when the client named
    the transaction, run at once (None: not handled here) when it was the driver's implicit one
    (as DDL statements are, see ``is_data_change``)."""
    from catalog.context import commit_context
    from catalog.v3 import refuse_v3_write
    from flight_server.flightsql.ingest import ingest_mode
    from flight_server.sqlwrite.commit import commit_once
    from flight_server.sqlwrite.rows import conform

    appends.authorizer.authorize(context, roles.FLIGHT_COMMANDS["statement-ingest"])
    opts = cmd.table_definition_options or p.TableDefinitionOptions()
    mode = ingest_mode(opts.if_not_exist, opts.if_exists)
    ns = split_namespace(cmd.schema) if cmd.schema else namespace
    identifier = (*ns, cmd.table)
    exists = appends.catalog.table_exists(identifier)
    if mode not in ("append", "create_append") or not exists or cmd.temporary:
        if implicit:
            return None
        raise errors.FailedPrecondition(
            "inside a transaction, ingest appends to an existing table (mode append); creating or replacing "
            "tables is DDL and not part of a transaction"
        )
    table = catalog.load_table(identifier)
    data = pa.Table.from_batches(list(read_batches(reader, context, appends.stopping)), schema=reader.schema)
    what = f"ingest into {'.'.join(identifier)}"
    # As outside a transaction (catalog.append): pyiceberg cannot write v3 manifests, whose
    # ValueError at commit was an INTERNAL error.
    refuse_v3_write(table.metadata, what)
    names = [f.name for f in table.schema().fields]
    missing = [n for n in names if n not in data.column_names]
    if missing or len(data.column_names) != len(names):
        raise errors.InvalidArgument(f"{what}: the stream's columns {data.column_names} do not match {names}")
    rows = conform(data.select(names), table.schema(), names, what)
    if rows.num_rows == 0:
        return 0
    with commit_context(extra={"sql": f"-- {what}"}):
        txn = table.transaction()
        txn.append(rows)
        commit_once(txn)
    return int(rows.num_rows)
