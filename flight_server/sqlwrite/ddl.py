"""DDL: schemas (namespaces), tables, columns and table properties.

Table-level DDL is one catalog commit each (create, drop, rename, schema change, property
change). CTAS is one commit too: a create-table transaction that carries the first snapshot.
Namespaces are not commits in the catalog (they have no snapshots); DROP SCHEMA ... CASCADE
drops each table (one commit per table) and then the namespaces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import (
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    ResolveError,
    TableAlreadyExistsError,
    ValidationError,
)
from sqlglot import exp

from catalog.expectations import EXPECT_PREFIX, ExpectationUnusable, expectations_of
from flight_server import errors
from flight_server.engine.iceberg_source import quote
from flight_server.engine.sql_text import DEFAULT_SCHEMA
from flight_server.security import roles
from flight_server.sqlwrite import mor, types
from flight_server.sqlwrite.commit import commit_once
from flight_server.sqlwrite.parse import TableName, bind_subset, schema_name, sql_of, table_name
from flight_server.sqlwrite.partitioning import partition_spec
from flight_server.sqlwrite.rows import arrow_schema, conform, input_names

if TYPE_CHECKING:
    from flight_server.sqlwrite.write import Write


def create_schema(w: Write) -> int:
    tree = w.tree
    ns = schema_name(tree.this)
    try:
        w.catalog.create_namespace(ns)
    except NamespaceAlreadyExistsError:
        if not tree.args.get("exists"):
            raise errors.AlreadyExists(f"CREATE SCHEMA: schema {'.'.join(ns)} already exists") from None
    return 0


def drop_schema(w: Write) -> int:
    tree = w.tree
    targets = tree.args.get("tables") or [tree.this]
    for target in targets:
        ns = schema_name(target)
        name = ".".join(ns)
        if not w.catalog.namespace_exists(ns):
            if tree.args.get("exists"):
                continue
            raise errors.NotFound(f"DROP SCHEMA: schema {name} does not exist")
        if roles.is_protected_namespace(ns):
            raise errors.FailedPrecondition(
                f"DROP SCHEMA: {DEFAULT_SCHEMA} is every session's current schema and cannot be dropped "
                "(drop its tables instead)"
            )
        if tree.args.get("cascade"):
            _drop_tree(w, ns)
        else:
            tables = w.catalog.list_tables(ns)
            children = w.catalog.list_namespaces(ns)
            if tables or children:
                raise errors.FailedPrecondition(
                    f"DROP SCHEMA: schema {name} is not empty ({len(tables)} tables, {len(children)} child schemas); "
                    "use DROP SCHEMA ... CASCADE"
                )
            w.catalog.drop_namespace(ns)
    return 0


def _drop_tree(w: Write, ns: tuple[str, ...]) -> None:
    for child in w.catalog.list_namespaces(ns):
        _drop_tree(w, tuple(child))
    for ident in w.catalog.list_tables(ns):
        with w.committing("drop", [".".join(ident)]):
            w.catalog.drop_table(ident)
    w.catalog.drop_namespace(ns)


def _require_namespace(w: Write, target: TableName, what: str) -> None:
    if not w.catalog.namespace_exists(target.namespace):
        raise errors.NotFound(f"{what} {target.qualified}: schema {'.'.join(target.namespace)} does not exist")


def create_table(w: Write) -> int:
    tree = w.tree
    props = tree.args.get("properties")
    if tree.args.get("replace"):
        raise errors.Unimplemented("CREATE OR REPLACE TABLE is not supported; DROP the table first")
    target = table_name(tree.this, w.default_schema)
    _require_namespace(w, target, "CREATE TABLE")
    if w.catalog.table_exists(target.identifier):
        if tree.args.get("exists"):
            return 0
        raise errors.AlreadyExists(f"CREATE TABLE: table {target.qualified} already exists")
    query = tree.expression
    if query is None:
        if not isinstance(tree.this, exp.Schema):
            raise errors.InvalidArgument(f"CREATE TABLE {target.qualified}: give column definitions or AS SELECT")
        defs = [sql_of(c) for c in tree.this.expressions if isinstance(c, exp.ColumnDef)]
        if len(defs) != len(tree.this.expressions):
            raise errors.Unimplemented(f"CREATE TABLE {target.qualified}: table constraints are not supported")
        for column in tree.this.expressions:
            _only_not_null(column, f"CREATE TABLE {target.qualified}")
        schema = types.schema_from_column_defs(defs)
        spec = partition_spec(props, schema, f"CREATE TABLE {target.qualified}")
        with w.committing("create", []):
            try:
                w.catalog.create_table(target.identifier, schema=schema, partition_spec=spec)
            except TableAlreadyExistsError:
                if tree.args.get("exists"):
                    return 0
                raise errors.AlreadyExists(f"CREATE TABLE: table {target.qualified} already exists") from None
        return 0
    return _create_as(w, target, sql_of(query), props)


def _only_not_null(column: exp.Expression, what: str) -> None:
    """Iceberg has required columns and nothing else: refuse DEFAULT, CHECK, keys, ... rather
    than accept and silently ignore them."""
    for constraint in column.args.get("constraints") or []:
        kind = constraint.args.get("kind") if isinstance(constraint, exp.ColumnConstraint) else constraint
        if not isinstance(kind, exp.NotNullColumnConstraint):  # NOT NULL, or an explicit NULL
            raise errors.Unimplemented(
                f"{what}: column {column.name}: only NOT NULL is supported, not {constraint.sql(dialect='duckdb')}")


def _create_as(w: Write, target: TableName, query_sql: str, props: exp.Expression | None) -> int:
    sql, pins = w.engine.plan(query_sql, w.default_schema)
    sql, params = bind_subset(sql, w.params)
    columns = w.engine.column_types(sql, pins, w.default_schema, params)
    schema = types.schema_from_query_types(columns)
    spec = partition_spec(props, schema, f"CREATE TABLE {target.qualified}")
    data = w.engine.query_table(sql, pins, w.default_schema, params, context=w.context)
    with w.committing("create", input_names(pins)):
        txn = w.catalog.create_table_transaction(target.identifier, schema=schema, partition_spec=spec)
        rows = conform(data, txn.table_metadata.schema(), [name for name, _ in columns], target.qualified)
        if rows.num_rows:
            txn.append(rows)
        try:
            commit_once(txn)
        except TableAlreadyExistsError:
            raise errors.AlreadyExists(f"CREATE TABLE: table {target.qualified} already exists") from None
    return int(data.num_rows)


def drop_table(w: Write) -> int:
    tree = w.tree
    for node in tree.args.get("tables") or [tree.this]:
        target = table_name(node, w.default_schema)
        try:
            with w.committing("drop", [target.qualified]):
                w.catalog.drop_table(target.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            if not tree.args.get("exists"):
                raise errors.NotFound(f"DROP TABLE: table {target.qualified} does not exist") from None
    return 0


def _load(w: Write, target: TableName, what: str) -> Any:
    try:
        return w.catalog.load_table(target.identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise errors.NotFound(f"{what}: table {target.qualified} does not exist") from None


def alter_table(w: Write) -> int:
    tree = w.tree
    kind = str(tree.args.get("kind") or "TABLE").upper()
    if kind != "TABLE":
        raise errors.Unimplemented(f"ALTER {kind} is not supported")
    target = table_name(tree.this, w.default_schema)
    actions = tree.args.get("actions") or []
    if len(actions) != 1:
        raise errors.Unimplemented("ALTER TABLE: one action per statement")
    action = actions[0]
    what = f"ALTER TABLE {target.qualified}"
    if isinstance(action, exp.AlterRename):
        new = table_name(action.this, target.namespace)
        _load(w, target, what)
        if w.catalog.table_exists(new.identifier):
            raise errors.AlreadyExists(f"{what} RENAME TO: table {new.qualified} already exists")
        _require_namespace(w, new, f"{what} RENAME TO")
        with w.committing("rename", [target.qualified]):
            w.catalog.rename_table(target.identifier, new.identifier)
        return 0
    if isinstance(action, exp.AlterSet):
        props = _properties(action, what)
        # As over REST: icefloe.* keys steer the server (admin), other properties are the
        # table owner's (write) — one rule on every port (flight_server.security.roles).
        w.authorize(roles.property_role(props))
        mor.check_properties(props, what)
        table = _load(w, target, what)
        _check_expectations(w, table, props, what)
        with w.committing("properties", [target.qualified]):
            txn = table.transaction()
            txn.set_properties(props)
            commit_once(txn)
        return 0
    table = _load(w, target, what)
    names = {f.name for f in table.schema().fields}
    with w.committing("schema", [target.qualified]):
        if isinstance(action, exp.ColumnDef):
            column = action.name
            if column in names:
                if action.args.get("exists"):
                    return 0
                raise errors.AlreadyExists(f"{what} ADD COLUMN: column {column} already exists")
            _only_not_null(action, what)
            added = types.schema_from_column_defs([sql_of(action)]).fields[0]
            if added.required:
                raise errors.InvalidArgument(
                    f"{what} ADD COLUMN {column}: a NOT NULL column cannot be added to a table that may have rows"
                )
            with table.update_schema() as upd:
                upd.add_column(column, added.field_type, required=False)
        elif isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() == "COLUMN":
            dropped = action.args.get("tables") or action.expressions
            if not dropped:
                raise errors.InvalidArgument(f"{what} DROP COLUMN: name the column")
            for col in dropped:
                if col.name not in names:
                    if action.args.get("exists"):
                        return 0
                    raise errors.NotFound(f"{what} DROP COLUMN: column {col.name} does not exist")
            if len(dropped) >= len(names):
                raise errors.InvalidArgument(f"{what} DROP COLUMN: a table must keep at least one column")
            with table.update_schema() as upd:
                for col in dropped:
                    upd.delete_column(col.name)
        elif isinstance(action, exp.RenameColumn):
            old, new_name = action.this.name, action.args["to"].name
            if old not in names:
                raise errors.NotFound(f"{what} RENAME COLUMN: column {old} does not exist")
            if new_name in names:
                raise errors.AlreadyExists(f"{what} RENAME COLUMN: column {new_name} already exists")
            with table.update_schema() as upd:
                upd.rename_column(old, new_name)
        elif isinstance(action, exp.AlterColumn):
            _alter_column(table, action, names, what)
        else:
            raise errors.Unimplemented(
                f"{what}: only ADD / DROP / RENAME / ALTER COLUMN, RENAME TO and SET (...) are supported"
            )
    return 0


def _alter_column(table: Any, action: exp.AlterColumn, names: set[str], what: str) -> None:
    """``ALTER COLUMN c [SET DATA] TYPE t`` (Iceberg's promotions only) and ``DROP NOT NULL``."""
    column = action.name
    if column not in names:
        raise errors.NotFound(f"{what} ALTER COLUMN: column {column} does not exist")
    dtype = action.args.get("dtype")
    if dtype is not None:
        if action.args.get("using") or action.args.get("collate"):
            raise errors.Unimplemented(f"{what} ALTER COLUMN {column}: USING / COLLATE are not supported")
        new_type = types.schema_from_column_defs([f"{quote(column)} {sql_of(dtype)}"]).fields[0].field_type
        current = table.schema().find_field(column).field_type
        if new_type == current:
            return
        try:
            with table.update_schema() as upd:
                upd.update_column(column, field_type=new_type)
        except (ValueError, TypeError, ResolveError, ValidationError) as exc:
            raise errors.InvalidArgument(
                f"{what} ALTER COLUMN {column}: cannot change {current} to {new_type} "
                f"(Iceberg allows int -> long, float -> double, wider decimal precision): {exc}") from None
    elif action.args.get("allow_null") is True:
        with table.update_schema() as upd:
            upd.update_column(column, required=False)
    elif action.args.get("allow_null") is False:
        raise errors.InvalidArgument(
            f"{what} ALTER COLUMN {column} SET NOT NULL: existing rows may hold NULL; Iceberg cannot make it required")
    else:
        raise errors.Unimplemented(f"{what} ALTER COLUMN {column}: only TYPE and DROP NOT NULL are supported")


def _check_expectations(w: Write, table: Any, props: dict[str, str], what: str) -> None:
    """Quality expectations are tried when they are set: one that cannot be evaluated would
    refuse every later write to the table (catalog.expectations)."""
    if not any(key.startswith(EXPECT_PREFIX) for key in props):
        return
    gate = w.quality_gate
    if gate is None or not hasattr(gate, "validate"):
        return
    try:
        gate.validate(".".join(table.name()), expectations_of({**table.properties, **props}),
                      arrow_schema(table.schema()))
    except ExpectationUnusable as exc:
        raise errors.InvalidArgument(f"{what} SET: {exc}") from None


def _properties(action: exp.Expression, what: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in action.expressions:
        if not isinstance(item, exp.EQ):
            raise errors.InvalidArgument(f"{what} SET: expected 'key' = 'value' pairs")
        key = item.this.name if isinstance(item.this, (exp.Column, exp.Identifier, exp.Literal)) else None
        value = item.expression
        if not key or not isinstance(value, (exp.Literal, exp.Boolean)):
            raise errors.InvalidArgument(f"{what} SET: expected 'key' = 'value' pairs with literal values")
        props[key] = value.name if isinstance(value, exp.Literal) else str(value.this).lower()
    if not props:
        raise errors.InvalidArgument(f"{what} SET: no properties given")
    return props
