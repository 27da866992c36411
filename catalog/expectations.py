"""Quality expectations of a table: what its properties declare, and what a check found.

A table declares expectations as properties (DESIGN: ingestion)::

    icefloe.expect.<name>             = <boolean SQL expression over one row>  |  unique(<col>, ...)
    icefloe.expect.<name>.on-failure  = block (default) | quarantine | warn

The catalog only reads them and carries their results; evaluating them needs an SQL engine,
which the catalog does not import: the server hands the appender a ``QualityGate`` (the
DuckDB one is ``flight_server.engine.quality``). A table that declares expectations refuses
appends when no gate is there to check them: an expectation nobody evaluated is a failure,
never a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

EXPECT_PREFIX = "icefloe.expect."
ON_FAILURE = ".on-failure"
BLOCK, QUARANTINE, WARN = "block", "quarantine", "warn"
ACTIONS = (BLOCK, QUARANTINE, WARN)
# The quarantine table of ``ns.t`` is ``ns.t__quarantine`` (next to the target, same namespace).
QUARANTINE_SUFFIX = "__quarantine"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_UNIQUE = re.compile(r"^\s*unique\s*\((?P<cols>[^()]*)\)\s*$", re.IGNORECASE)
# Rows shown in a block's message: enough to find the bad input, short enough for a status.
SAMPLE_ROWS = 3
QUARANTINE_SCHEMA = pa.schema([
    pa.field("_row", pa.string()),              # the failing row as JSON (any target schema fits)
    pa.field("_expectation", pa.string()),      # the expectation(s) it failed, comma-separated
    pa.field("_reason", pa.string()),           # their SQL
    pa.field("_source_position", pa.string()),  # the connector's position (JSON), if any
    pa.field("_append_id", pa.string()),        # also in the target commit's record (quality.append_id)
    pa.field("_quarantined_at", pa.timestamp("us", tz="UTC")),
])


class ExpectationUnusable(Exception):
    """An expectation could not be evaluated (bad SQL, a missing column, an unknown action, no
    gate): the append is refused, whatever the expectation's action."""


class QualityBlocked(Exception):
    """Rows failed an expectation whose action is ``block``: nothing was committed."""

    def __init__(self, message: str, results: list[AssertionResult]) -> None:
        super().__init__(message)
        self.results = results


@dataclass(frozen=True)
class Expectation:
    """One declared expectation. ``unique`` holds the key columns of a ``unique(...)`` form."""

    name: str
    sql: str
    action: str
    unique: tuple[str, ...] | None = None
    problem: str | None = None  # set when the declaration itself is malformed

    @property
    def kind(self) -> str:
        return "unique" if self.unique is not None else "custom_sql"


@dataclass
class AssertionResult:
    """What checking one expectation over one append found."""

    name: str
    sql: str
    action: str
    kind: str
    checked_rows: int = 0
    failed_rows: int = 0
    sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.failed_rows == 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sql": self.sql, "action": self.action, "kind": self.kind,
                "checked_rows": self.checked_rows, "failed_rows": self.failed_rows, "success": self.success}


def expectations_of(properties: dict[str, str]) -> list[Expectation]:
    """The expectations ``properties`` declare, in name order (malformed ones carry ``problem``)."""
    found: list[Expectation] = []
    for key in sorted(properties):
        if not key.startswith(EXPECT_PREFIX) or key.endswith(ON_FAILURE):
            continue
        name = key[len(EXPECT_PREFIX):]
        sql = properties[key]
        action = properties.get(key + ON_FAILURE, BLOCK).strip().lower()
        problem = None
        unique: tuple[str, ...] | None = None
        if not _NAME.match(name):
            problem = f"expectation name {name!r} must be letters, digits, '_' or '-'"
        elif action not in ACTIONS:
            problem = f"on-failure must be one of {', '.join(ACTIONS)}, not {action!r}"
        elif not sql.strip():
            problem = "the expectation is empty"
        else:
            matched = _UNIQUE.match(sql)
            if matched:
                unique = tuple(c.strip().strip('"') for c in matched.group("cols").split(",") if c.strip())
                if not unique:
                    problem = "unique() needs at least one column"
        found.append(Expectation(name, sql.strip(), action, unique, problem))
    for key in properties:  # an action for an expectation that does not exist is a mistake too
        if key.startswith(EXPECT_PREFIX) and key.endswith(ON_FAILURE) and key[: -len(ON_FAILURE)] not in properties:
            name = key[len(EXPECT_PREFIX): -len(ON_FAILURE)]
            found.append(Expectation(name, "", BLOCK, None, f"on-failure is set but icefloe.expect.{name} is not"))
    return found


def quarantine_identifier(identifier: tuple[str, ...]) -> tuple[str, ...]:
    return (*identifier[:-1], identifier[-1] + QUARANTINE_SUFFIX)


@dataclass
class BatchVerdict:
    """One batch after the gate: the rows to append and the rows to quarantine."""

    good: pa.RecordBatch
    quarantined: pa.Table | None = None


class GateSession(Protocol):
    """The checks of one append (``unique`` spans all its batches)."""

    def check(self, batch: pa.RecordBatch) -> BatchVerdict:
        """Raises QualityBlocked or ExpectationUnusable; nothing may be committed then."""

    def results(self) -> list[AssertionResult]:
        """Every expectation's result so far."""

    def close(self) -> None:
        """Release the engine."""


class QualityGate(Protocol):
    def session(self, table: str, expectations: list[Expectation], source_position: str | None,
                append_id: str) -> GateSession:
        """A session checking ``expectations`` of ``table`` over one append's batches."""


def summary(results: list[AssertionResult], append_id: str, quarantined: int) -> dict[str, Any]:
    """The commit record's ``quality`` entry (lineage facet, metrics, feed)."""
    return {"append_id": append_id, "quarantined_rows": quarantined,
            "assertions": [r.to_json() for r in results]}


def lineage_facet_body(quality: Any) -> list[dict[str, Any]] | None:
    """The ``assertions`` of an OpenLineage ``dataQualityAssertions`` facet, from a record's
    ``quality`` entry (None when there is none)."""
    if not isinstance(quality, dict) or not isinstance(quality.get("assertions"), list):
        return None
    out = []
    for item in quality["assertions"]:
        if not isinstance(item, dict):
            continue
        entry: dict[str, Any] = {"assertion": str(item.get("kind", "custom_sql")), "success": bool(item.get("success")),
                                 "name": str(item.get("name", "")),
                                 "severity": "warn" if item.get("action") == WARN else "error",
                                 "content": str(item.get("sql", "")), "contentType": "sql",
                                 "expected": "0 failing rows", "actual": f"{item.get('failed_rows', 0)} failing rows"}
        out.append(entry)
    return out


def merge_summaries(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``quality`` entry for a group commit of several gated appends."""
    merged: dict[str, dict[str, Any]] = {}
    for one in summaries:
        for item in one.get("assertions", []):
            into = merged.setdefault(item["name"], {**item, "checked_rows": 0, "failed_rows": 0})
            into["checked_rows"] += item.get("checked_rows", 0)
            into["failed_rows"] += item.get("failed_rows", 0)
            into["success"] = into["failed_rows"] == 0
    return {"append_ids": [s.get("append_id") for s in summaries],
            "quarantined_rows": sum(int(s.get("quarantined_rows", 0)) for s in summaries),
            "assertions": list(merged.values())}
