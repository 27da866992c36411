"""Facts about SQL text found with DuckDB's tokenizer (parameter markers), and the session schema default."""

from __future__ import annotations

import duckdb


def parameter_markers(sql: str) -> int:
    """How many distinct parameters ``sql`` has (``?`` each count; ``$n`` / ``$name`` once each)."""
    return len(marker_spans(sql)[1])


def marker_spans(sql: str) -> tuple[list[tuple[int, int]], list[str]]:
    tokens = duckdb.tokenize(sql)
    edits: list[tuple[int, int]] = []
    names: list[str] = []
    for i, (pos, kind) in enumerate(tokens):
        if kind != duckdb.token_type.operator:
            continue
        if sql.startswith("?", pos):
            edits.append((pos, pos + 1))
            names.append(f"?{len(edits)}")
        elif sql.startswith("$", pos) and i + 1 < len(tokens) and tokens[i + 1][0] == pos + 1:
            end = tokens[i + 2][0] if i + 2 < len(tokens) else len(sql)
            edits.append((pos, pos + 1 + len(sql[pos + 1 : end].rstrip())))
            name = sql[edits[-1][0] : edits[-1][1]]
            if name not in names:
                names.append(name)
    return edits, names


# Every Flight SQL session's current schema until it sets another: unqualified names resolve
# there. The server creates it at start; DROP SCHEMA refuses it.
DEFAULT_SCHEMA = "default"


def split_namespace(name: str) -> tuple[str, ...]:
    """A DB schema name as a namespace: multi-level namespaces are joined with '.'."""
    return tuple(name.split("."))
