"""Who may do what: the least role of every operation, on every port, in one table.

Roles are ranked ``read`` < ``write`` < ``admin`` (``flight_server.security.users.ROLES``). The same
operation needs the same role whichever way it arrives: a REST route, a Flight method or
action, a Flight SQL command, or a SQL statement. The REST router (``http.rest.routes``) and
the Flight side (``server``, ``auth``, ``flightsql.dispatcher``, ``appends``,
``staged_appends``, ``operations``, ``sqlwrite``) look their roles up here and hard-code none,
so a change of policy is one edit here. ``tests/flight_server/security/test_roles_table.py``
walks every REST route (enumerated from the router) and every Flight action (from
``list_actions``) and command family with a user of each role and compares the answers with
this table: a route or action added without an entry here fails it.

Beyond the entry points, the *content* of a change can need more than its route:

- table properties named ``icefloe.*`` steer the server itself (snapshot retention, schema
  policy, compaction, quality expectations): setting or removing one needs ``admin`` on every
  path (REST create-table properties, REST commits and multi-table transactions; Flight SQL
  ``ALTER TABLE ... SET``); any other property needs ``write``, on every path;
- expiring snapshots (REST ``remove-snapshots``) is maintenance, ``admin`` as
  ``icefloe.maintain`` is;
- the namespace ``default`` (every Flight SQL session's current schema) is never dropped.

The embedded path (``icefloe.open``) is in-process and has no roles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flight_server.security.users import ROLE_RANK

READ, WRITE, ADMIN = "read", "write", "admin"

# -- REST catalog (``/v1/...``): (method, path pattern) -> least role ------------------------
# Pattern segments as the router writes them ("{namespace}", "{table}" for parameters).
REST_ROUTES: Mapping[tuple[str, tuple[str, ...]], str] = {
    ("GET", ("config",)): READ,
    ("POST", ("oauth", "tokens")): READ,  # the login itself: no bearer token yet (a form body)
    ("GET", ("namespaces",)): READ,
    ("POST", ("namespaces",)): WRITE,
    ("GET", ("namespaces", "{namespace}")): READ,
    ("HEAD", ("namespaces", "{namespace}")): READ,
    ("DELETE", ("namespaces", "{namespace}")): WRITE,  # as SQL DROP SCHEMA; never `default`
    # Namespace properties have no SQL or Flight equivalent; kept admin (as they always were).
    ("POST", ("namespaces", "{namespace}", "properties")): ADMIN,
    ("GET", ("namespaces", "{namespace}", "tables")): READ,
    ("POST", ("namespaces", "{namespace}", "tables")): WRITE,  # icefloe.* properties: admin
    ("POST", ("namespaces", "{namespace}", "register")): WRITE,
    ("GET", ("namespaces", "{namespace}", "tables", "{table}")): READ,
    ("HEAD", ("namespaces", "{namespace}", "tables", "{table}")): READ,
    ("POST", ("namespaces", "{namespace}", "tables", "{table}")): WRITE,  # see COMMIT_UPDATES
    ("DELETE", ("namespaces", "{namespace}", "tables", "{table}")): WRITE,  # as SQL DROP TABLE
    ("POST", ("namespaces", "{namespace}", "tables", "{table}", "metrics")): READ,  # reports, dropped
    ("POST", ("tables", "rename")): WRITE,  # as SQL ALTER TABLE ... RENAME TO
    ("POST", ("transactions", "commit")): WRITE,  # see COMMIT_UPDATES, per table change
    # Iceberg views: as tables (SQL CREATE / DROP VIEW are ddl, write).
    ("GET", ("namespaces", "{namespace}", "views")): READ,
    ("POST", ("namespaces", "{namespace}", "views")): WRITE,
    ("GET", ("namespaces", "{namespace}", "views", "{view}")): READ,
    ("HEAD", ("namespaces", "{namespace}", "views", "{view}")): READ,
    ("POST", ("namespaces", "{namespace}", "views", "{view}")): WRITE,
    ("DELETE", ("namespaces", "{namespace}", "views", "{view}")): WRITE,
    ("POST", ("views", "rename")): WRITE,
    ("POST", ("namespaces", "{namespace}", "register-view")): WRITE,  # as register (tables)
}

# Update actions of a REST commit that need more than the route's ``write``. The properties
# updates are judged per key (``property_role``), not here.
COMMIT_UPDATES: Mapping[str, str] = {
    "remove-snapshots": ADMIN,  # snapshot expiry: maintenance, as icefloe.maintain
}

# -- Flight methods: the floor checked before any handler runs ------------------------------
# DoPut stays at read here because binding parameters of a prepared *query* is a DoPut;
# ``FLIGHT_COMMANDS`` raises it once the descriptor is known.
# Keys are ``pyarrow.flight.FlightMethod`` member names; a method missing here needs admin.
FLIGHT_METHODS: Mapping[str, str] = {
    "HANDSHAKE": READ,
    "LIST_FLIGHTS": READ,
    "GET_FLIGHT_INFO": READ,
    "GET_SCHEMA": READ,
    "DO_GET": READ,
    "DO_PUT": READ,
    "DO_ACTION": READ,
    "LIST_ACTIONS": READ,
    "DO_EXCHANGE": READ,
}

# -- Flight actions (DoAction type) -> least role ------------------------------------------
# Deny by default: an action missing here needs ``UNLISTED_ACTION``.
FLIGHT_ACTIONS: Mapping[str, str] = {
    # Flight SQL's own: prepared statements hold no state; sessions are per caller. Preparing a
    # write needs nothing: running it needs write.
    "CreatePreparedStatement": READ,
    "ClosePreparedStatement": READ,
    "SetSessionOptions": READ,
    "GetSessionOptions": READ,
    "CloseSession": READ,
    # A transaction holds nothing until a write inside it (which needs write) stages something;
    # a read user may use one for repeatable reads.
    "BeginTransaction": READ,
    "EndTransaction": READ,
    # Answered "not supported" to everyone, so nobody is told they lack a role for them.
    "CreatePreparedSubstraitPlan": READ,
    "BeginSavepoint": READ,
    "EndSavepoint": READ,
    "CancelQuery": READ,
    "CancelFlightInfo": READ,
    "RenewFlightEndpoint": READ,
    # icefloe's own.
    "icefloe.health": READ,
    "icefloe.status": ADMIN,  # names every table, the lineage outbox, the queries running
    "icefloe.maintain": ADMIN,  # rewrites and deletes files, expires snapshots
    "icefloe.commit-staged": WRITE,  # another user's tokens: admin (staged_appends)
    "icefloe.abort-staged": WRITE,
    # Ingest connectors (flight_server.ingest.service). Adding one makes the server read a
    # folder or call a URL of the caller's choosing: admin, as is removing one. Running,
    # pausing and backfilling an existing one commit to its table: write. Status names
    # source folders and URLs: write.
    "icefloe.ingest.add": ADMIN,
    "icefloe.ingest.remove": ADMIN,
    "icefloe.ingest.list": WRITE,
    "icefloe.ingest.status": WRITE,
    "icefloe.ingest.run": WRITE,
    "icefloe.ingest.pause": WRITE,
    "icefloe.ingest.resume": WRITE,
    "icefloe.ingest.backfill": WRITE,
}
UNLISTED_ACTION = WRITE
# Committing or aborting staging tokens someone else staged.
OTHERS_STAGED = ADMIN

# -- Flight SQL commands and icefloe's own descriptors -> least role ------------------------
FLIGHT_COMMANDS: Mapping[str, str] = {
    "metadata": READ,  # CommandGetCatalogs / DbSchemas / Tables / SqlInfo / XdbcTypeInfo / keys
    "statement-query": READ,  # CommandStatementQuery, CommandPreparedStatementQuery (see SQL)
    "prepared-query-parameters": READ,  # DoPut CommandPreparedStatementQuery: binds, runs nothing
    "statement-update": WRITE,  # DoPut CommandStatementUpdate / CommandPreparedStatementUpdate
    "statement-ingest": WRITE,  # DoPut CommandStatementIngest (ADBC bulk ingest)
    "append": WRITE,  # DoPut FlightDescriptor.for_path(ns, t)
    "change-scan": READ,  # GetFlightInfo {"changes": "ns.t", ...} and its DoGet
    "feed": READ,  # DoExchange commits.v1 / rows.v1
    "ticket": READ,  # DoGet of a ticket GetFlightInfo issued (checked again for what it holds)
}

# -- SQL statements (by kind) -> least role --------------------------------------------------
SQL_STATEMENTS: Mapping[str, str] = {
    "query": READ,  # SELECT, SHOW, DESCRIBE, ...
    "dml": WRITE,  # INSERT, UPDATE, DELETE, MERGE, TRUNCATE
    "ddl": WRITE,  # CREATE / DROP SCHEMA, CREATE / DROP / ALTER TABLE, views
    # ALTER TABLE ... SET (...) of an icefloe.* property (``property_role``); other
    # properties need write, as over REST.
    "alter-table-properties": ADMIN,
    "icefloe.changes": READ,  # as a change scan
    "icefloe.commit_staged": WRITE,  # as the actions
    "icefloe.abort_staged": WRITE,
}

# -- contents of a change -----------------------------------------------------------------
ADMIN_PROPERTY_PREFIX = "icefloe."  # server-steering table properties (see module docstring)
# Never dropped, by any route: ``default`` is every Flight SQL session's current schema
# (flight_server.engine.sql_text.DEFAULT_SCHEMA; not imported, that module loads DuckDB).
PROTECTED_NAMESPACES: frozenset[tuple[str, ...]] = frozenset({("default",)})


def rest_role(method: str, pattern: tuple[str, ...]) -> str:
    """Least role of a REST route; admin for a route missing from the table (deny by default)."""
    return REST_ROUTES.get((method, pattern), ADMIN)


def action_role(action_type: str) -> str:
    """Least role of a Flight action (``UNLISTED_ACTION`` for one this table does not name)."""
    return FLIGHT_ACTIONS.get(action_type, UNLISTED_ACTION)


def admin_properties(keys: Iterable[str]) -> list[str]:
    """The keys among ``keys`` only an admin may set or remove, sorted."""
    return sorted({key for key in keys if isinstance(key, str) and key.startswith(ADMIN_PROPERTY_PREFIX)})


def property_role(keys: Iterable[str]) -> str:
    """Least role that may set or remove the table properties ``keys`` (REST and SQL alike)."""
    return ADMIN if admin_properties(keys) else WRITE


def changed_admin_properties(current: Mapping[str, str], set_: Mapping[str, str], removed: Iterable[str]) -> list[str]:
    """The admin-only keys a change really changes: set to another value, or removed while
    present. (Iceberg-Java's replace transaction re-sends every property of the table, so an
    unchanged ``icefloe.*`` key in it is no admin act.)"""
    changed = [key for key, value in set_.items() if current.get(key) != value]
    changed += [key for key in removed if key in current]
    return admin_properties(changed)


def allows(role: str, needed: str) -> bool:
    """Whether a user of ``role`` may do what needs ``needed``."""
    return ROLE_RANK[role] >= ROLE_RANK[needed]


def is_protected_namespace(namespace: tuple[str, ...]) -> bool:
    return tuple(namespace) in PROTECTED_NAMESPACES
