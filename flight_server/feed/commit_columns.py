"""The commit columns (``_seq``, ``_snapshot_id``, ``_operation``) that rows of the row feed and
of change scans carry, added to a batch of a commit's rows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from catalog.commit_log import CommitRecord


def with_commit_columns(
    batch: pa.RecordBatch, target: pa.Schema, record: CommitRecord, operation: str | None = None
) -> pa.RecordBatch:
    """``batch`` with the commit columns, ``_operation`` being ``operation`` or the commit's."""
    n = batch.num_rows
    arrays: list[Any] = []
    for field in target:
        if field.name == "_seq":
            arrays.append(pa.repeat(pa.scalar(record.seq, pa.int64()), n))
        elif field.name == "_snapshot_id":
            arrays.append(pa.repeat(pa.scalar(record.snapshot_id, pa.int64()), n))
        elif field.name == "_operation":
            arrays.append(pa.repeat(pa.scalar(operation or record.operation, pa.utf8()), n))
        else:
            arrays.append(batch.column(field.name).cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)
