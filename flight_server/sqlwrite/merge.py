"""MERGE INTO: one Iceberg commit that updates, deletes and inserts rows by a join.

``MERGE INTO target [AS t] USING source [AS s] ON cond`` (or ``USING (col, ...)``) with any
sequence of ``WHEN MATCHED [AND c] THEN UPDATE SET ... | UPDATE SET * | DELETE | DO NOTHING``
and ``WHEN NOT MATCHED [BY TARGET] [AND c] THEN INSERT [(cols)] VALUES (...) | INSERT * |
INSERT | DO NOTHING``. As in the SQL standard (and Spark, Trino), the first clause whose
condition holds decides a row's action, and a target row that more than one source row would
update or delete is an error (INVALID_ARGUMENT, nothing committed): DuckDB's native MERGE
applies every match, which makes the result depend on the join order.

The whole decision is one DuckDB query at the base snapshot, the source left-joined to the
target, the target read one source per data file with ``__icefloe_file`` (the file's index)
and ``__icefloe_pos`` (the row's position in it): per row the action taken (``__icefloe_action``,
the clause index; not-matched clauses from ``_INSERT_BASE``) and the new row's values, cast to
the column types in the query. What happens next follows ``write.merge.mode``:

- ``merge-on-read``: the updated and deleted rows become position delete files, the updated
  and inserted rows new data files, one row-delta snapshot (``mor``);
- ``copy-on-write`` (the default): the data files holding an updated or deleted row are read
  again and rewritten without those rows (a vectorised anti-join on file index and position),
  plus the updated and inserted rows, in one overwrite snapshot.

``WHEN NOT MATCHED BY SOURCE`` and ``RETURNING`` are refused (UNIMPLEMENTED).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from catalog.deletes import distinct_sorted
from catalog.v3 import refuse_v3_write
from flight_server import errors
from flight_server.engine.deletes import POSITION_COLUMN
from flight_server.engine.iceberg_source import quote
from flight_server.sqlwrite import mor
from flight_server.sqlwrite.commit import commit_once
from flight_server.sqlwrite.dml import _column_types, _commit_rewrite, _load
from flight_server.sqlwrite.parse import TableName, bind_subset, sql_of, table_name, table_reference
from flight_server.sqlwrite.rows import conform, input_names
from flight_server.sqlwrite.target_files import TAG, TargetFiles, target_pin, view_sql, with_target

if TYPE_CHECKING:
    from flight_server.sqlwrite.write import Write

ACTION = "__icefloe_action"
_INSERT_BASE = 1000  # not-matched clause k has action _INSERT_BASE + k
# A (file index, position) pair as one int64 key: positions stay below 2**40 (a trillion rows
# in one file), file indexes below 2**23.
_POSITION_BITS = 40


@dataclass
class _Clause:
    kind: str  # "update", "delete", "insert" or "nothing"
    condition: str | None
    values: dict[str, str] = field(default_factory=dict)  # target column -> SQL (update / insert)


@dataclass
class _Plan:
    target: TableName
    what: str
    target_ref: str  # FROM item of the target (keeps the statement's alias)
    target_qualifier: str  # how the statement names the target's columns
    source_ref: str  # FROM item of the source
    on: str
    matched: list[_Clause]
    not_matched: list[_Clause]


def merge(w: Write) -> int:

    tree = w.tree
    target = table_name(tree.this, w.default_schema)
    what = f"MERGE INTO {target.qualified}"
    if tree.args.get("returning"):
        raise errors.Unimplemented(f"{what}: RETURNING is not supported")
    table = _load(w, target, what)
    # Up front, not only when the table has files: an insert-only MERGE into an empty v3 table
    # would otherwise append with pyiceberg's writer, which cannot make a valid v3 commit.
    refuse_v3_write(table.metadata, what)
    mode = mor.write_mode(table, "write.merge.mode", what)
    columns = _column_types(w, target, target_pin(table, target), table)
    plan = _plan(w, tree, target, what, columns, {f.name for f in table.schema().fields if f.required})
    files = TargetFiles(w, table, target, what, prune=_key_range(w, tree, plan, dict(columns),
                                                            target_pin(table, target)))
    result = _decide(w, files, plan, columns)
    action = result.column(2).to_numpy(zero_copy_only=False)
    changes = np.isin(action, [i for i, c in enumerate(plan.matched) if c.kind in ("update", "delete")])
    updated = np.isin(action, [i for i, c in enumerate(plan.matched) if c.kind == "update"])
    inserted = action >= _INSERT_BASE
    hits = result.filter(pa.array(changes)).select([0, 1])
    _check_cardinality(hits, what)
    names = [n for n, _ in columns]
    new_rows = result.filter(pa.array(updated | inserted)).select(list(range(3, result.num_columns)))
    new_rows = conform(new_rows, table.schema(), names, what)
    n_updated, n_inserted = int(updated.sum()), int(inserted.sum())
    n_deleted = int(hits.num_rows) - n_updated
    if hits.num_rows == 0 and new_rows.num_rows == 0:
        return 0
    counts = (n_updated + n_inserted, n_updated + n_deleted)
    if new_rows.num_rows:
        w.check_quality(table, new_rows, "MERGE")
    if hits.num_rows == 0:
        _append(w, files, target, new_rows, counts)
    elif mode == mor.MERGE_ON_READ:
        mor.commit_changes(w, files, target.qualified, "overwrite" if new_rows.num_rows else "delete", hits,
                           new_rows, counts)
    else:
        _rewrite(w, files, target, hits, new_rows, names, counts, what)
    return n_updated + n_deleted + n_inserted


def _plan(
    w: Write, tree: exp.Expression, target: TableName, what: str, columns: list[tuple[str, str]],
    required: set[str],
) -> _Plan:
    node = tree.this
    qualifier = quote(node.alias) if node.alias else quote(target.name)
    source = tree.args.get("using")
    if source is None:
        raise errors.InvalidArgument(f"{what}: USING names no source")
    source_ref = sql_of(source)
    on_node = tree.args.get("on")
    using_cols = tree.args.get("using_cond")
    if isinstance(using_cols, list) and using_cols:
        if not source.alias_or_name:
            raise errors.InvalidArgument(f"{what}: USING (columns) needs a source with a name or alias")
        source_qualifier = quote(source.alias_or_name)
        on = " AND ".join(f"{qualifier}.{quote(c.name)} = {source_qualifier}.{quote(c.name)}" for c in using_cols)
    elif isinstance(on_node, exp.Expression):
        on = sql_of(on_node)
    else:
        raise errors.InvalidArgument(f"{what}: an ON condition is required")
    types = dict(columns)
    names = [n for n, _ in columns]
    lowered = {n.lower(): n for n in types}
    source_columns: list[str] | None = None

    def source_names() -> list[str]:
        nonlocal source_columns
        if source_columns is None:
            sql, pins = w.engine.plan(f"SELECT * FROM {source_ref}", w.default_schema)
            sql, params = bind_subset(sql, w.params)
            source_columns = [n for n, _ in w.engine.column_types(sql, pins, w.default_schema, params)]
        return source_columns

    def column(name: str) -> str:
        match = name if name in types else lowered.get(name.lower())
        if match is None:
            raise errors.NotFound(f"{what}: the table has no column {name}")
        return match

    def cast(name: str, value: str) -> str:
        return f"CAST(({value}) AS {types[name]})"

    def by_name() -> dict[str, str]:
        sources = {n.lower(): n for n in source_names()}
        missing = [n for n in names if n.lower() not in sources]
        if missing:
            raise errors.InvalidArgument(f"{what}: * needs source columns named like the table's; missing "
                                         + ", ".join(missing))
        alias = quote(source.alias_or_name)
        return {n: cast(n, f"{alias}.{quote(sources[n.lower()])}") for n in names}

    matched: list[_Clause] = []
    not_matched: list[_Clause] = []
    whens = tree.args.get("whens")
    for when in (whens.expressions if whens is not None else []):
        condition_node = when.args.get("condition")
        condition = sql_of(condition_node) if condition_node is not None else None
        then = when.args.get("then")
        by_source = bool(when.args.get("source"))
        if by_source:
            raise errors.Unimplemented(f"{what}: WHEN NOT MATCHED BY SOURCE is not supported")
        is_matched = bool(when.args.get("matched"))
        if isinstance(then, exp.Var) and then.name.upper() in ("DELETE", "DO NOTHING"):
            kind = "delete" if then.name.upper() == "DELETE" else "nothing"
            if kind == "delete" and not is_matched:
                raise errors.InvalidArgument(f"{what}: WHEN NOT MATCHED cannot DELETE (there is no target row)")
            (matched if is_matched else not_matched).append(_Clause(kind, condition))
        elif isinstance(then, exp.Update):
            if not is_matched:
                raise errors.InvalidArgument(f"{what}: WHEN NOT MATCHED cannot UPDATE (there is no target row)")
            values: dict[str, str] = {}
            if any(isinstance(e, exp.Star) for e in then.expressions):
                values = by_name()
            else:
                for item in then.expressions:
                    if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
                        raise errors.InvalidArgument(f"{what}: SET expects column = value")
                    name = column(item.this.name)
                    if name in values:
                        raise errors.InvalidArgument(f"{what}: column {name} is set twice")
                    values[name] = cast(name, sql_of(item.expression))
            matched.append(_Clause("update", condition, values))
        elif isinstance(then, exp.Insert):
            if is_matched:
                raise errors.InvalidArgument(f"{what}: WHEN MATCHED cannot INSERT (the row exists)")
            not_matched.append(_Clause("insert", condition, _insert_values(then, what, names, column, cast,
                                                                           by_name, source_names, source,
                                                                           required)))
        else:
            raise errors.InvalidArgument(f"{what}: unsupported WHEN clause {sql_of(when)}")
    if not matched and not not_matched:
        raise errors.InvalidArgument(f"{what}: no WHEN clause")
    return _Plan(target, what, table_reference(node, view_sql(target)), qualifier, source_ref, on, matched,
                 not_matched)


def _key_range(w: Write, tree: exp.Expression, plan: _Plan, types: dict[str, str], base: Any) -> str | None:
    """A condition on the target's join keys that every matched target row meets (each key
    between the least and greatest source value), so the files whose column bounds rule it out
    are not read at all; None when the ON clause has no ``target.col = source.col`` conjunct
    or a key is not a whole number or text on both sides. One small query over the source."""

    on = tree.args.get("on")
    source = tree.args.get("using")
    if not isinstance(on, exp.Expression) or source is None or not source.alias_or_name:
        return None
    target_names = {plan.target_qualifier.strip('"'), plan.target.name}
    lowered = {n.lower(): n for n in types}
    keys: list[tuple[str, str]] = []  # (target column, source column SQL)
    for conjunct in on.flatten() if isinstance(on, exp.And) else [on]:
        if not isinstance(conjunct, exp.EQ):
            continue
        left, right = conjunct.this, conjunct.expression
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
            continue
        if right.table in target_names and left.table == source.alias_or_name:
            left, right = right, left
        if left.table in target_names and right.table == source.alias_or_name and left.name.lower() in lowered:
            keys.append((lowered[left.name.lower()], sql_of(right)))
    if not keys:
        return None
    items = ", ".join(f"min({k}), max({k})" for _, k in keys)
    sql, pins = w.engine.plan(f"SELECT {items} FROM {plan.source_ref}", w.default_schema)
    sql, params = bind_subset(sql, w.params)
    bounds = w.engine.query_table(sql, with_target(pins, base) if pins else pins, w.default_schema, params,
                                  context=w.context).to_pylist()[0]
    values = list(bounds.values())
    conditions = []
    for i, (column, _) in enumerate(keys):
        low, high = values[2 * i], values[2 * i + 1]
        if low is None:  # no source row has a key: NULL matches nothing, so no target row is matched
            return "FALSE"
        # Only where the bounds compare as the join does: whole numbers against an integer
        # column, text against a text column (anything else is simply not pruned).
        kind = _PRUNABLE.get(types[column])
        if kind is None or isinstance(low, bool) or type(low) is not kind or type(high) is not kind:
            continue
        conditions.append(f"{quote(column)} BETWEEN {_literal(low)} AND {_literal(high)}")
    return " AND ".join(conditions) or None


_PRUNABLE: dict[str, type] = {"INTEGER": int, "BIGINT": int, "VARCHAR": str}


def _literal(value: object) -> str:
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"


def _insert_values(
    then: exp.Insert, what: str, names: list[str], column: Any, cast: Any, by_name: Any, source_names: Any,
    source: exp.Expression, required: set[str],
) -> dict[str, str]:
    listed = then.this
    row = then.expression
    values: dict[str, str]
    if isinstance(listed, exp.Star):
        values = by_name()
    elif isinstance(listed, exp.Tuple) and any(isinstance(e, exp.Alias) for e in listed.expressions):
        raise errors.Unimplemented(f"{what}: INSERT BY NAME is not supported; use INSERT *")
    else:
        if isinstance(row, exp.Tuple):
            items = [sql_of(e) for e in row.expressions]
        elif row is None or row is False:
            if listed:
                raise errors.InvalidArgument(f"{what}: INSERT lists columns but no VALUES")
            alias = quote(source.alias_or_name)
            items = [f"{alias}.{quote(n)}" for n in source_names()]
        else:
            raise errors.InvalidArgument(f"{what}: INSERT expects VALUES (...)")
        targets = [column(c.name) for c in listed.expressions] if isinstance(listed, exp.Tuple) else names
        if len(set(targets)) != len(targets):
            raise errors.InvalidArgument(f"{what}: INSERT lists a column twice")
        if len(targets) != len(items):
            raise errors.InvalidArgument(
                f"{what}: INSERT gives {len(items)} values for {len(targets)} columns")
        values = {t: cast(t, v) for t, v in zip(targets, items, strict=True)}
    for name in names:
        if name not in values and name in required:
            raise errors.InvalidArgument(f"{what}: column {name} is NOT NULL and needs a value in INSERT")
    return values


def _case(clauses: list[_Clause], base: int) -> str:
    arms = " ".join(f"WHEN ({c.condition if c.condition is not None else 'TRUE'}) THEN {base + i}"
                    for i, c in enumerate(clauses))
    return f"CASE {arms} END" if arms else "NULL"


def _decide(w: Write, files: TargetFiles, plan: _Plan, columns: list[tuple[str, str]]) -> pa.Table:
    """Per joined row that takes an action: file index, position, action, new values."""

    q = plan.target_qualifier
    action = (f"CASE WHEN {q}.{TAG} IS NULL THEN {_case(plan.not_matched, _INSERT_BASE)} "
              f"ELSE {_case(plan.matched, 0)} END")
    values = []
    clauses = [(i, c) for i, c in enumerate(plan.matched)] + [(_INSERT_BASE + i, c)
                                                              for i, c in enumerate(plan.not_matched)]
    for name, typ in columns:
        arms = []
        for code, clause in clauses:
            if clause.kind == "update":
                arms.append(f"WHEN {code} THEN {clause.values.get(name, f'{q}.{quote(name)}')}")
            elif clause.kind == "insert":
                arms.append(f"WHEN {code} THEN {clause.values.get(name, f'CAST(NULL AS {typ})')}")
        values.append(f"CASE {ACTION} {' '.join(arms)} END AS {quote(name)}" if arms
                      else f"CAST(NULL AS {typ}) AS {quote(name)}")
    # The action is computed once and referred to by its alias (DuckDB resolves select-list
    # aliases in later items and in WHERE); rows taking no action are dropped in the query.
    query = (f"SELECT {q}.{TAG}, {q}.{POSITION_COLUMN}, {action} AS {ACTION}, {', '.join(values)} "
             f"FROM {plan.source_ref} LEFT JOIN {plan.target_ref} ON ({plan.on}) WHERE {ACTION} IS NOT NULL")
    sql, pins = w.engine.plan(query, w.default_schema)
    files.pins = with_target(pins, files.base)
    sql, params = bind_subset(sql, w.params)
    return w.engine.query_table(sql, files.pins, w.default_schema, params, context=w.context,
                                file_tags=files.tags, file_positions=True,
                                   file_deletes=files.deletes)


def _keys(files_col: pa.ChunkedArray | pa.Array, positions: pa.ChunkedArray | pa.Array) -> np.ndarray:
    tags = np.asarray(files_col.to_numpy(zero_copy_only=False), dtype=np.int64)
    pos = np.asarray(positions.to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.left_shift(tags, _POSITION_BITS) | pos


def _check_cardinality(hits: pa.Table, what: str) -> None:
    keys = _keys(hits.column(0), hits.column(1))
    if len(distinct_sorted(keys)) != len(keys):  # numpy's unique took ~9 ms for 50k keys, this 0.3
        raise errors.InvalidArgument(
            f"{what}: a target row matched more than one source row that would update or delete it; make the "
            "ON condition match at most one source row per target row (nothing was committed)"
        )


def _append(w: Write, files: TargetFiles, target: TableName, rows: pa.Table, counts: tuple[int, int]) -> None:
    from catalog.context import commit_context

    inputs = [i for i in input_names(getattr(files, "pins", [])) if i != target.qualified]
    with w.committing("append", inputs), commit_context(extra={"row_counts": {"added": counts[0],
                                                                               "deleted": counts[1]}}):
        txn = files.table.transaction()
        txn.append(rows)
        commit_once(txn)


def _rewrite(
    w: Write, files: TargetFiles, target: TableName, hits: pa.Table, new_rows: pa.Table, names: list[str],
    counts: tuple[int, int], what: str,
) -> None:
    """Copy-on-write: every file holding a changed row rewritten without it, plus the new rows."""
    touched = sorted({int(t) for t in pc.unique(hits.column(0)).to_pylist()})
    cols = ", ".join(quote(n) for n in names)
    query = (f"SELECT {TAG}, {POSITION_COLUMN}, {cols} FROM {view_sql(target)} "
             f"WHERE {TAG} IN ({', '.join(map(str, touched))})")
    current = w.engine.query_table(query, [files.base], w.default_schema, None, context=w.context,
                                   file_tags=files.tags, file_positions=True,
                                   file_deletes=files.deletes)
    changed = np.isin(_keys(current.column(0), current.column(1)), _keys(hits.column(0), hits.column(1)))
    kept = conform(current.filter(pa.array(~changed)).select(list(range(2, current.num_columns))),
                   files.table.schema(), names, what)
    rows = pa.concat_tables([kept, new_rows]) if new_rows.num_rows else kept
    inputs = [i for i in input_names(getattr(files, "pins", [])) if i != target.qualified]
    _commit_rewrite(w, files, touched, rows, "overwrite", inputs, counts)

