"""Table commits of ``RocksCatalog``: one table, or several tables atomically.

A commit is staged first, outside the commit lock (requirements checked against the current
metadata, updates applied, the new metadata file written durably), then landed under the lock:
the compare-and-swap on each table's metadata location, and one fsync'd RocksDB write batch
holding every new table pointer, the commit sequence and one commit-log record per table. A
multi-table commit therefore lands completely or not at all; a lost race on any table
discards every staged metadata file and lands nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import CommitTableResponse, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AddSnapshotUpdate, AssertCreate, TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier
from pyiceberg.utils.properties import property_as_bool

from catalog import keys, table_files
from catalog.durable_io import remove
from catalog.metadata_json import write_metadata
from catalog.metadata_ops import apply_updates, describe_commit, expire_snapshots, snapshots_to_retain
from catalog.requirements import check as check_requirement

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

    from catalog.catalog_internals import CatalogInternals

logger = logging.getLogger("icefloe.catalog")

TableChange = tuple["str | Identifier", Sequence[TableRequirement], Sequence[TableUpdate]]


@dataclass
class StagedCommit:
    """A table change whose new metadata file is written but not yet pointed at."""

    ns: tuple[str, ...]
    name: str
    base_location: str | None
    base: TableMetadata | None
    new: TableMetadata
    new_location: str | None  # None: the change is a no-op, nothing to land
    io: FileIO | None
    info: dict[str, Any]

    @property
    def qualified(self) -> str:
        return ".".join((*self.ns, self.name))


def stage(
    catalog: CatalogInternals,
    identifier: str | Identifier,
    requirements: Sequence[TableRequirement],
    updates: Sequence[TableUpdate],
) -> StagedCommit:
    """Check requirements and write the new metadata file of one table change.

    Raises:
        NoSuchTableError: The table does not exist and the change does not create it.
        CommitFailedException: A requirement is not met.
        ValueError: An update cannot be applied (pyiceberg's own validation).
    """
    ns, name = catalog._split(identifier)
    pointer = catalog._pointer(ns, name)
    base_location = pointer["metadata_location"] if pointer else None
    base = catalog._read_metadata(ns, name, base_location) if base_location else None
    if base is None and requirements and not any(isinstance(r, AssertCreate) for r in requirements):
        # Requirements on a table that is not there: it is missing, not a lost race.
        raise NoSuchTableError(f"Table does not exist: {'.'.join((*ns, name))}")
    for requirement in requirements:
        check_requirement(requirement, base)
    if base is None and not updates:
        raise NoSuchTableError(f"Table does not exist: {'.'.join((*ns, name))}")
    new = apply_updates(
        base if base is not None else catalog._empty_table_metadata(),
        tuple(updates),
        base_location,
        creating=base is None,
    )
    if base is not None and new == base:
        return StagedCommit(ns, name, base_location, base, base, None, None, {})
    if any(isinstance(update, AddSnapshotUpdate) for update in updates):
        # Bounded metadata keeps the cost of every later commit flat.
        new = expire_snapshots(new, snapshots_to_retain(new), catalog.pins.pinned(ns, name))
    # Nothing lands that names a file outside the table's folder (REST and in-process alike).
    moved = base is None or new.location != base.location
    root = catalog.table_root(new.location, (*ns, name)) if moved else catalog.files.table_root(new.location)
    io = catalog.confined_io(root)
    table_files.check_metadata(io, new, base)
    version = catalog._parse_metadata_version(base_location) + 1 if base_location else 0
    provider = load_location_provider(new.location, new.properties)
    new_location = provider.new_table_metadata_file_location(version)
    io.confine(new_location)
    write_metadata(new, io, new_location)
    info = describe_commit(tuple(updates), new)
    if base is None:
        info["operation"] = "create"
    return StagedCommit(ns, name, base_location, base, new, new_location, io, info)


def _discard(staged: Sequence[StagedCommit]) -> None:
    for commit in staged:
        if commit.io is not None and commit.new_location is not None:
            try:
                commit.io.delete(commit.new_location)
            except Exception:  # best effort: maintenance removes what is left
                logger.warning("could not remove unreferenced metadata file after a refused commit")


def commit_tables(
    catalog: CatalogInternals, changes: Sequence[TableChange], record_fields: Sequence[dict[str, Any]] | None = None
) -> list[CommitTableResponse]:
    """Commit changes to several tables atomically: all land in one write batch, or none.

    Args:
        catalog: The catalog to commit to.
        changes: (identifier, requirements, updates) per table; each table at most once.
        record_fields: Per change, fields merged into its commit-log record (``extra`` there
            is merged into the record's extra): a Flight SQL transaction names itself and
            each table's SQL and exact row counts this way.

    Returns:
        The new metadata and its location, per change, in order.

    Raises:
        ValueError: No change, or a table named twice.
        NoSuchTableError: A table does not exist (and its change does not create it).
        NoSuchNamespaceError: A table to create has no namespace.
        CommitFailedException: A requirement is not met or a concurrent commit won; nothing
            of any table landed.
        CatalogReadOnlyError: The catalog is open read-only.
    """
    catalog._check_writable()
    if not changes:
        raise ValueError("a transaction needs at least one table change")
    seen: set[tuple[tuple[str, ...], str]] = set()
    for identifier, _, _ in changes:
        parts = catalog._split(identifier)
        if parts in seen:
            raise ValueError(f"table {'.'.join((*parts[0], parts[1]))} appears more than once in one transaction")
        seen.add(parts)
    staged: list[StagedCommit] = []
    try:
        for identifier, requirements, updates in changes:
            staged.append(stage(catalog, identifier, requirements, updates))
    except BaseException:
        _discard(staged)
        raise
    for commit, more in zip(staged, record_fields or [{}] * len(staged), strict=True):
        commit.info.update(more)
    landing = [commit for commit in staged if commit.new_location is not None]
    if landing:
        with catalog._commit_lock:
            try:
                for commit in landing:
                    current = catalog._pointer(commit.ns, commit.name)
                    if (current["metadata_location"] if current else None) != commit.base_location:
                        raise CommitFailedException(
                            f"Table {commit.qualified} was changed by a concurrent commit; reload and retry"
                        )
                    if commit.base is None:
                        catalog._require_namespace(commit.ns)
                        catalog._refuse_view_name(commit.ns, commit.name)
            except BaseException:
                _discard(landing)
                raise
            catalog._land_many([_record(catalog, commit) for commit in landing])
            for commit in landing:
                catalog._metadata_cache[(commit.ns, commit.name)] = (str(commit.new_location), commit.new)
        for commit in landing:
            _delete_dropped_metadata(commit)
    return [
        CommitTableResponse(metadata=c.new, metadata_location=c.new_location or c.base_location)  # type: ignore[call-arg]
        for c in staged
    ]


def _record(
    catalog: CatalogInternals, commit: StagedCommit
) -> tuple[dict[str, Any], dict[bytes, bytes], tuple[bytes, ...]]:
    location = str(commit.new_location)
    uuid = str(commit.new.table_uuid)
    fields = {"namespace": commit.ns, "table": commit.name, "table_uuid": uuid, "metadata_location": location,
              **commit.info}
    pointer = catalog._pointer_value(location, commit.base_location, uuid)
    return fields, {keys.table_key(commit.ns, commit.name): pointer}, ()


def _delete_dropped_metadata(commit: StagedCommit) -> None:
    # Honour write.metadata.delete-after-commit.enabled (on by default for our tables): remove
    # metadata files that dropped out of the metadata log, against the real base.
    # (pyiceberg's MetastoreCatalog._delete_old_metadata, with local files unlinked directly:
    # its FileIO sets up a filesystem for every delete.)
    if commit.base is None or commit.io is None or not property_as_bool(
            commit.new.properties, TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED,
            TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED_DEFAULT):
        return
    kept = {entry.metadata_file for entry in commit.new.metadata_log}
    for location in {entry.metadata_file for entry in commit.base.metadata_log} - kept:
        try:
            remove(commit.io, location)
        except FileNotFoundError:
            pass
        except Exception:
            logger.warning("could not remove old metadata file %s of %s", location, commit.qualified)
