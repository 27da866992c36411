"""The commit history the watch page pages through: ``GET /api/commits``, read from the commit log.

Parameters (each optional, each at most once):

- ``before=SEQ``: commits with a smaller seq (default: up to the head), newest first;
- ``limit=N``: at most N commits (1..``MAX_LIMIT``, default ``DEFAULT_LIMIT``);
- ``table=ns.t``: only that table's commits (the table must exist);
- ``operation=OP``: only commits with that operation (``append``, ``delete``, ``replace``, ...),
  or ``maintenance`` for every commit that changes no row (compaction, expiry).

The work per request is bounded: at most ``MAX_SCAN`` log records are read (in chunks, newest
first), whatever the filters. When a filter matches less than ``limit`` within them the answer
says where to go on: ``next_before`` is always the seq to pass as ``before`` for the next page
(None once the start of the retained log is reached), so a rare table's history is paged in
steps of bounded cost instead of one unbounded scan.

Each commit is shown as ``commit_view``: the commit-log record's own fields (no server path,
no SQL text: a statement's literals may be secrets) plus what the page needs to say what it did:
``net_rows`` (added - deleted) and ``maintenance`` (changes no row a reader sees).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from catalog.commit_log import CommitRecord, CursorExpiredError
from flight_server import errors
from flight_server.commit_kinds import is_maintenance
from flight_server.observability.operations import iso_time

if TYPE_CHECKING:
    from catalog import RocksCatalog

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# Log records one request reads at most (a few ms each thousand): the cost of a page is bounded
# even when a filter matches nothing.
MAX_SCAN = 5000
CHUNK = 500
MAX_SEQ = 2**63 - 1
OPERATION = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MAINTENANCE = "maintenance"
_HIDDEN = frozenset({"metadata_location", "extra", "namespace", "committed_at_us"})
# Keys of a record's ``extra`` the page may show: counts and flags, never text a client wrote.
_EXTRA_SHOWN = ("maintenance", "data_change", "removed_files", "deleted_files", "added_delete_files",
                "removed_delete_files", "rewritten_rows", "group_size")


def commit_view(record: CommitRecord) -> dict[str, Any]:
    """``record`` for the page: every field of the record but paths and free text, whatever
    fields this version of ``CommitRecord`` has (counting is being refined elsewhere)."""
    view: dict[str, Any] = {"seq": record.seq, "committed_at": iso_time(record.committed_at_us),
                            "namespace": ".".join(record.namespace)}
    for field in dataclasses.fields(record):
        if field.name not in _HIDDEN and field.name not in view:
            view[field.name] = getattr(record, field.name)
    for key in _EXTRA_SHOWN:
        value = record.extra.get(key)
        if key not in view and isinstance(value, (bool, int, str)) and not (isinstance(value, str) and len(value) > 64):
            view[key] = value
    view["table_name"] = record.qualified_name
    added, deleted = record.added_rows, record.deleted_rows
    view["net_rows"] = (added or 0) - (deleted or 0) if added is not None or deleted is not None else None
    view["maintenance"] = is_maintenance(record)
    if isinstance(record.extra.get("maintenance"), str):
        view["maintenance_kind"] = record.extra["maintenance"]
    return view


def _int_param(raw: str | None, name: str, low: int, high: int, default: int) -> int:
    if raw is None:
        return default
    if not raw.isdigit() or len(raw) > 19:
        raise errors.InvalidArgument(f"{name} must be a whole number from {low} to {high}, got {raw[:40]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise errors.InvalidArgument(f"{name} must be from {low} to {high}, got {value}")
    return value


def parse_query(params: dict[str, str]) -> tuple[int | None, int, str | None]:
    """(before, limit, operation) of a request, checked without reading anything.

    Raises:
        errors.InvalidArgument: A value out of range or malformed.
    """
    before = _int_param(params.get("before"), "before", 1, MAX_SEQ, 0) if "before" in params else None
    limit = _int_param(params.get("limit"), "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    operation = params.get("operation")
    if operation is not None and not OPERATION.fullmatch(operation):
        raise errors.InvalidArgument("operation must be an operation name such as append, delete, replace, "
                                     f"expire or {MAINTENANCE}, got {operation[:40]!r}")
    return before, limit, operation


def _matches(record: CommitRecord, table: str | None, operation: str | None) -> bool:
    if table is not None and record.qualified_name != table:
        return False
    if operation is None:
        return True
    if operation == MAINTENANCE:
        return is_maintenance(record)
    return record.operation == operation


def page(catalog: RocksCatalog, before: int | None, limit: int, table: str | None,
         operation: str | None) -> dict[str, Any]:
    """One page of history, newest first (see the module docstring)."""
    log = catalog.log
    head, log_start = log.head(), log.log_start()
    top = head if before is None else min(before - 1, head)
    found: list[CommitRecord] = []
    scanned = 0
    low = top + 1  # lowest seq read so far
    filtered = table is not None or operation is not None
    while low > log_start and len(found) < limit and scanned < MAX_SCAN:
        # Unfiltered, every record read is shown: read exactly what is still wanted.
        want = CHUNK if filtered else limit - len(found)
        start = max(log_start, low - min(want, MAX_SCAN - scanned))
        try:
            chunk = list(log.read(start - 1, limit=low - start))
        except CursorExpiredError:  # trimmed under us: go on from the new start
            log_start = log.log_start()
            if start < log_start:
                continue
            raise errors.Unavailable("the commit log was trimmed while it was read; retry") from None
        scanned += len(chunk)
        for record in reversed(chunk):
            if len(found) >= limit:
                low = record.seq + 1
                break
            low = record.seq
            if _matches(record, table, operation):
                found.append(record)
        else:
            low = start
    return {
        "head": head, "log_start": log_start, "commits": [commit_view(r) for r in found],
        "next_before": low if low > log_start else None, "scanned": scanned,
    }
