"""Checking a commit's requirements, worded as Iceberg-Java words them.

pyiceberg's requirement classes check the same conditions as Iceberg-Java's
``UpdateRequirement`` but word the failures their own way ("current schema id has changed:
expected 0, found 1"). Engines and Iceberg's own catalog test-suite match on Java's wording
("Requirement failed: current schema changed: expected id 0 != 1"), whichever port the commit
came through, so every requirement of every commit is checked here and nowhere else.
"""

from __future__ import annotations

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    AssertCreate,
    AssertCurrentSchemaId,
    AssertDefaultSortOrderId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    TableRequirement,
)


def _failed(message: str) -> CommitFailedException:
    # Iceberg-Java's CommitFailureMessages.requirementFailure
    return CommitFailedException(f"Requirement failed: {message}")


def check(requirement: TableRequirement, base: TableMetadata | None) -> None:
    """Raise ``CommitFailedException`` (Iceberg-Java's wording) unless ``requirement`` holds.

    ``base`` is None when the table does not exist (a create transaction).
    """
    if isinstance(requirement, AssertCreate):
        if base is not None:
            raise _failed("table already exists")
        return
    if base is None:
        if isinstance(requirement, (AssertLastAssignedFieldId, AssertLastAssignedPartitionId)):
            return  # Java checks these only against an existing table
        raise _failed("current table metadata is missing")
    if isinstance(requirement, AssertTableUUID):
        if str(requirement.uuid).lower() != str(base.table_uuid).lower():
            # Java's argument order: the table's UUID first, then the one the client expected
            raise _failed(f"UUID does not match: expected {base.table_uuid} != {requirement.uuid}")
    elif isinstance(requirement, AssertRefSnapshotId):
        _check_ref(requirement, base)
    elif isinstance(requirement, AssertLastAssignedFieldId):
        if base.last_column_id != requirement.last_assigned_field_id:
            raise _failed(f"last assigned field id changed: expected id {requirement.last_assigned_field_id} "
                          f"!= {base.last_column_id}")
    elif isinstance(requirement, AssertCurrentSchemaId):
        if requirement.current_schema_id != base.current_schema_id:
            raise _failed(f"current schema changed: expected id {requirement.current_schema_id} "
                          f"!= {base.current_schema_id}")
    elif isinstance(requirement, AssertLastAssignedPartitionId):
        if base.last_partition_id != requirement.last_assigned_partition_id:
            raise _failed(f"last assigned partition id changed: expected id "
                          f"{requirement.last_assigned_partition_id} != {base.last_partition_id}")
    elif isinstance(requirement, AssertDefaultSpecId):
        if requirement.default_spec_id != base.default_spec_id:
            raise _failed(f"default partition spec changed: expected id {requirement.default_spec_id} "
                          f"!= {base.default_spec_id}")
    elif isinstance(requirement, AssertDefaultSortOrderId):
        if requirement.default_sort_order_id != base.default_sort_order_id:
            raise _failed(f"default sort order changed: expected id {requirement.default_sort_order_id} "
                          f"!= {base.default_sort_order_id}")
    else:  # a requirement type pyiceberg knows and this module does not: its own check and wording
        requirement.validate(base)


def _check_ref(requirement: AssertRefSnapshotId, base: TableMetadata) -> None:
    # Unlike pyiceberg, Java does not refuse a non-main ref on a table without snapshots here:
    # the ref's own update decides.
    ref = base.refs.get(requirement.ref)
    if ref is not None:
        kind = str(ref.snapshot_ref_type.value)  # "branch" or "tag"
        if requirement.snapshot_id is None:
            raise _failed(f"{kind} {requirement.ref} was created concurrently")
        if requirement.snapshot_id != ref.snapshot_id:
            raise _failed(f"{kind} {requirement.ref} has changed: expected id {requirement.snapshot_id} "
                          f"!= {ref.snapshot_id}")
    elif requirement.snapshot_id is not None:
        raise _failed(f"branch or tag {requirement.ref} is missing, expected {requirement.snapshot_id}")
