"""DML: INSERT, DELETE, UPDATE, TRUNCATE — each one Iceberg commit based on one snapshot.

INSERT runs its source (VALUES or a query) in the engine at pinned snapshots, casts each
value to the target column's DuckDB type in the same query (DuckDB's casting rules), and
appends the result (pyiceberg append: new data files, one snapshot).

DELETE and UPDATE follow the table's ``write.delete.mode`` / ``write.update.mode``:
merge-on-read writes position delete files (``mor``); copy-on-write (the default) is at
file granularity: the target is read at its current
snapshot through one source per data file, tagged ``__icefloe_file``; a first query counts
the rows the WHERE clause selects per file, and only files with at least one selected row
are touched. A file whose every row is deleted is dropped from the table without being
read again; the other affected files are rewritten (the kept rows for DELETE, every row with
the SET expressions applied where the condition holds for UPDATE) into new files, and one
overwrite snapshot removes the old files and adds the new ones. No position or equality
delete files are written, so every reader (DuckDB, pyiceberg, Spark) sees plain data files.
Delete files other engines wrote are applied when the target is read (a rewritten file holds
only its visible rows); those left pointing at removed files no longer match any file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles
from sqlglot import exp

from catalog.arrow_types import to_plain
from catalog.context import commit_context
from catalog.v3 import refuse_v3_write
from flight_server import errors
from flight_server.engine import PinnedTable
from flight_server.engine.duckdb_types import exact_duckdb_type
from flight_server.engine.iceberg_source import quote
from flight_server.engine.tables import table_hint
from flight_server.sqlwrite import mor
from flight_server.sqlwrite.commit import commit_once
from flight_server.sqlwrite.parse import TableName, bind_subset, sql_of, table_name, table_reference
from flight_server.sqlwrite.rows import arrow_schema, conform, conform_batch, input_names
from flight_server.sqlwrite.target_files import TAG, TargetFiles, target_pin, view_sql, with_target

if TYPE_CHECKING:
    from flight_server.sqlwrite.write import Write



def _load(w: Write, target: TableName, what: str) -> Any:
    try:
        table = w.catalog.load_table(target.identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        hint = table_hint(w.catalog, target.namespace, target.name)
        raise errors.NotFound(f"{what}: table {target.qualified} does not exist{hint}") from None
    # Every write, up front: an empty v3 table has no target files to refuse on, and inside a
    # transaction an INSERT's rows reached pyiceberg's manifest writer (a ValueError: INTERNAL).
    refuse_v3_write(table.metadata, what)
    return table


def _refuse(tree: exp.Expression, what: str, *args: str) -> None:
    for arg in args:
        if tree.args.get(arg):
            raise errors.Unimplemented(f"{what}: {arg.upper()} is not supported")


def _column_types(w: Write, target: TableName, pin: PinnedTable, table: Any = None) -> list[tuple[str, str]]:
    """(name, DuckDB type) of the target's columns as its view has them at ``pin``.

    From the table's schema when every type maps exactly (no query: asking the view plans the
    snapshot's files, a fixed cost of every statement); otherwise from the view itself."""
    if table is not None:
        schema = table.schemas().get(pin.schema_id) or table.schema()
        types = [(f.name, exact_duckdb_type(f.field_type)) for f in schema.fields]
        if all(t is not None for _, t in types):
            return [(n, str(t)) for n, t in types]
    return w.engine.column_types(f"SELECT * FROM {view_sql(target)}", [pin], None)


# -- INSERT ------------------------------------------------------------------------------------


def insert(w: Write) -> int:
    tree = w.tree
    target = table_name(tree.this, w.default_schema)
    what = f"INSERT INTO {target.qualified}"
    _refuse(tree, what, "returning", "conflict", "overwrite", "where")
    table = _load(w, target, what)
    source = tree.expression
    if source is None:
        raise errors.InvalidArgument(f"{what}: nothing to insert")
    sql, pins = w.engine.plan(sql_of(source), w.default_schema)
    base = target_pin(table, target)
    pins = with_target(pins, base)
    source_sql, source_params = bind_subset(sql, w.params)
    sources = w.engine.column_types(source_sql, pins, w.default_schema, source_params)
    columns = _column_types(w, target, base, table)
    mapping = _insert_mapping(tree, what, [n for n, _ in sources], [n for n, _ in columns])
    required = {f.name for f in table.schema().fields if f.required}
    # Each source column is named after the target column it fills, so that a failed cast
    # ("when casting from source column city_id") names the user's column.
    alias = {src: quote(name) for (name, _), src in zip(columns, mapping, strict=True) if src is not None}
    select = []
    for (name, typ), src in zip(columns, mapping, strict=True):
        if src is None and name in required:
            raise errors.InvalidArgument(f"{what}: column {name} is NOT NULL and needs a value")
        value = "NULL" if src is None else f"__icefloe_src.{alias[src]}"
        select.append(f"CAST({value} AS {typ}) AS {quote(name)}")
    aliases = ", ".join(alias.get(i, f"c{i}") for i in range(len(sources)))
    final = f"SELECT {', '.join(select)} FROM ({sql}) AS __icefloe_src({aliases})"
    inputs = input_names([p for p in pins if p is not base])
    if w.appender is not None and not w.param_rows:
        # Streamed: DuckDB's batches go straight into the appender's file writer (memory stays
        # bounded); the same group-commit path as DoPut. Appends commute, so a lost race only
        # re-bases the new files onto the newer snapshot (the appender retries).
        bound, params = bind_subset(final, w.params)
        names = [n for n, _ in columns]
        stream = w.engine.stream(bound, pins, w.default_schema, params, context=w.context)
        try:
            batches = (conform_batch(b, table.schema(), names, what) for b in stream)
            with w.committing("append", inputs):
                result = w.appender.append_stream(target.identifier, arrow_schema(table.schema()), batches)
        finally:
            stream.close()  # ends the query now, even when the appender stopped reading early
        return int(result.rows)
    parts = []
    param_sets: list[list[Any] | None] = list(w.param_rows) if w.param_rows else [w.params]
    for values in param_sets:  # several parameter rows: one append for all
        bound, params = bind_subset(final, values)
        parts.append(w.engine.query_table(bound, pins, w.default_schema, params, context=w.context))
    data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    rows = conform(data, table.schema(), [n for n, _ in columns], what)
    if rows.num_rows == 0:
        return 0
    with w.committing("append", inputs):
        if w.appender is not None:
            w.appender.append_table(target.identifier, rows)
        else:
            w.check_quality(table, rows, "write in a transaction")
            txn = table.transaction()
            txn.append(rows)
            commit_once(txn)
    return int(rows.num_rows)


def _check_updated(w: Write, table: Any, files: TargetFiles, new_values: list[str], ref: str,
                   cond: str | None) -> None:
    """The rows an UPDATE writes, as they will be, through the table's quality gate (only
    those: rows it leaves alone are not checked again)."""
    from catalog.expectations import expectations_of

    if not expectations_of(table.properties):
        return
    query = f"SELECT {', '.join(new_values)} FROM {ref}" + (f" WHERE {cond}" if cond is not None else "")
    w.check_quality(table, files.read(w, query), "SQL UPDATE")


def _insert_mapping(tree: exp.Expression, what: str, sources: list[str], targets: list[str]) -> list[int | None]:
    """For each target column, the index of the source column that fills it (None: NULL)."""
    listed = [i.name for i in tree.this.expressions] if isinstance(tree.this, exp.Schema) else None
    if tree.args.get("by_name"):
        if listed is not None:
            raise errors.InvalidArgument(f"{what}: BY NAME cannot be combined with a column list")
        lowered = {t.lower(): t for t in targets}
        by_target: dict[str, int] = {}
        for i, name in enumerate(sources):
            match = name if name in targets else lowered.get(name.lower())
            if match is None:
                raise errors.InvalidArgument(f"{what} BY NAME: the table has no column {name}")
            if match in by_target:
                raise errors.InvalidArgument(f"{what} BY NAME: column {match} is given twice")
            by_target[match] = i
        return [by_target.get(t) for t in targets]
    if listed is not None:
        lowered = {t.lower(): t for t in targets}
        resolved = []
        for name in listed:
            match = name if name in targets else lowered.get(name.lower())
            if match is None:
                raise errors.InvalidArgument(f"{what}: the table has no column {name}")
            resolved.append(match)
        if len(set(resolved)) != len(resolved):
            raise errors.InvalidArgument(f"{what}: a column is listed twice")
        if len(resolved) != len(sources):
            raise errors.InvalidArgument(f"{what}: {len(resolved)} columns listed but {len(sources)} values given")
        position = {name: i for i, name in enumerate(resolved)}
        return [position.get(t) for t in targets]
    if len(sources) != len(targets):
        raise errors.InvalidArgument(
            f"{what}: the table has {len(targets)} columns but {len(sources)} values were given "
            "(list the columns or use BY NAME)"
        )
    return list(range(len(targets)))


# -- DELETE / UPDATE / TRUNCATE ---------------------------------------------------------------


def _commit_rewrite(
    w: Write, files: TargetFiles, removed: list[int], rows: pa.Table | None, operation: str, inputs: list[str],
    counts: tuple[int, int],
) -> None:
    """One snapshot: drop the ``removed`` files, add ``rows`` as new files; ``counts`` = the
    rows truly (added, deleted), for the commit log (the summary only has the net change)."""
    table = files.table
    with w.committing(operation, inputs), commit_context(extra={"row_counts": {"added": counts[0],
                                                                               "deleted": counts[1]}}):
        txn = table.transaction()
        kind = Operation.DELETE if rows is None or rows.num_rows == 0 else Operation.OVERWRITE
        producer = _OverwriteFiles(operation=kind, transaction=txn, io=table.io, branch="main")
        with producer as ow:
            for i in removed:
                ow.delete_data_file(files.files[i])
            if rows is not None and rows.num_rows:
                for data_file in _dataframe_to_data_files(
                    table_metadata=txn.table_metadata, write_uuid=ow.commit_uuid, df=to_plain(rows), io=table.io
                ):
                    ow.append_data_file(data_file)
        commit_once(txn)


def _target_of(w: Write, node: exp.Expression, what_prefix: str) -> tuple[TableName, str]:
    target = table_name(node, w.default_schema)
    return target, f"{what_prefix} {target.qualified}"


def delete(w: Write) -> int:
    tree = w.tree
    target, what = _target_of(w, tree.this, "DELETE FROM")
    _refuse(tree, what, "using", "returning", "limit", "order")
    table = _load(w, target, what)
    where = tree.args.get("where")
    cond = sql_of(where.this) if where is not None else None
    ref = table_reference(tree.this, view_sql(target))
    if mor.write_mode(table, "write.delete.mode", what) == mor.MERGE_ON_READ:
        # Only files the condition may match are read (a copy-on-write DELETE reads them all
        # to count, which is cheap next to its rewrite).
        return mor.delete(w, TargetFiles(w, table, target, what, prune=cond), target.qualified, ref, cond)
    files = TargetFiles(w, table, target, what)
    selected = files.count_selected(w, ref, cond)
    total = sum(selected.values())
    if total == 0:
        return 0
    whole = [i for i, n in selected.items() if n == files.files[i].record_count and i not in files.with_deletes]
    partial = [i for i in selected if i not in whole]
    rows = None
    if partial:
        assert cond is not None
        keep = (f"SELECT * EXCLUDE ({TAG}) FROM {ref} WHERE {TAG} IN ({', '.join(map(str, partial))}) "
                f"AND ({cond}) IS NOT TRUE")
        rows = conform(files.read(w, keep), table.schema(), [], what)
    inputs = input_names(getattr(files, "pins", []))
    _commit_rewrite(w, files, sorted(selected), rows, "delete", [i for i in inputs if i != target.qualified],
                    (0, total))
    return total


def truncate(w: Write) -> int:
    tree = w.tree
    nodes = tree.expressions or [tree.this]
    if len(nodes) != 1:
        raise errors.Unimplemented("TRUNCATE: one table per statement")
    target, what = _target_of(w, nodes[0], "TRUNCATE")
    table = _load(w, target, what)
    files = TargetFiles(w, table, target, what)
    if not files.files:
        return 0
    if files.with_deletes:
        total = sum(files.count_selected(w, table_reference(nodes[0], view_sql(target)), None).values())
    else:
        total = sum(int(f.record_count) for f in files.files)
    _commit_rewrite(w, files, list(range(len(files.files))), None, "delete", [], (0, total))
    return total


def update(w: Write) -> int:
    tree = w.tree
    target, what = _target_of(w, tree.this, "UPDATE")
    _refuse(tree, what, "from", "returning", "limit", "order", "with")
    table = _load(w, target, what)
    names = [f.name for f in table.schema().fields]
    assignments: dict[str, str] = {}
    for item in tree.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise errors.InvalidArgument(f"{what}: SET expects column = value")
        name = item.this.name
        match = name if name in names else {n.lower(): n for n in names}.get(name.lower())
        if match is None:
            raise errors.NotFound(f"{what}: the table has no column {name}")
        if match in assignments:
            raise errors.InvalidArgument(f"{what}: column {match} is set twice")
        assignments[match] = sql_of(item.expression)
    where = tree.args.get("where")
    cond = sql_of(where.this) if where is not None else None
    ref = table_reference(tree.this, view_sql(target))
    if mor.write_mode(table, "write.update.mode", what) == mor.MERGE_ON_READ:
        files = TargetFiles(w, table, target, what, prune=cond)
        types = dict(_column_types(w, target, files.base, table))
        new_values = [f"CAST(({assignments[n]}) AS {types[n]}) AS {quote(n)}" if n in assignments else quote(n)
                      for n in names]
        _check_updated(w, table, files, new_values, ref, cond)
        return mor.update(w, files, target.qualified, ref, cond, new_values, names, what)
    files = TargetFiles(w, table, target, what)
    selected = files.count_selected(w, ref, cond)
    total = sum(selected.values())
    if total == 0:
        return 0
    types = dict(_column_types(w, target, files.base, table))
    select = []
    for name in names:
        col = quote(name)
        if name in assignments:
            value = f"CAST(({assignments[name]}) AS {types[name]})"
            value = value if cond is None else f"CASE WHEN ({cond}) THEN {value} ELSE {col} END"
            select.append(f"{value} AS {col}")
        else:
            select.append(col)
    query = f"SELECT {', '.join(select)} FROM {ref} WHERE {TAG} IN ({', '.join(map(str, sorted(selected)))})"
    rows = conform(files.read(w, query), table.schema(), names, what)
    _check_updated(w, table, files, [f"CAST(({assignments[n]}) AS {types[n]}) AS {quote(n)}" if n in assignments
                                     else quote(n) for n in names], ref, cond)
    inputs = input_names(getattr(files, "pins", []))
    _commit_rewrite(w, files, sorted(selected), rows, "overwrite", [i for i in inputs if i != target.qualified],
                    (total, total))
    return total
