"""Table metadata JSON written without re-serialising the snapshots it carries over.

Every commit writes a new ``metadata.json`` that lists every retained snapshot (up to
``icefloe.snapshots.retain``, 100 by default). pyiceberg serialises the whole model each time,
and each snapshot's summary goes through a Python serializer: with 100 snapshots that was a
quarter of an append's commit (py-spy over 250 appends). A snapshot never changes once it is
written, so its JSON is kept (per table, snapshot id and manifest list) and the file is the
rest of the metadata with the kept snapshot texts spliced in — the same bytes pyiceberg
writes (``tests/catalog/test_metadata_json.py`` compares them).
"""

from __future__ import annotations

from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import IcebergBaseModel

from catalog.durable_io import write_new
from catalog.lru import LockedLRU

# Enough for the retained snapshots of many busy tables; older entries are only re-serialised.
CACHE_SIZE = 20_000
_EMPTY = '"snapshots":[]'

_texts: LockedLRU[tuple[str, int, str], str] = LockedLRU(CACHE_SIZE)


def dump_metadata(metadata: TableMetadata) -> str:
    """``model_dump_json()``; for format v3 (tables other engines created and commit to over
    REST) the base model's serializer, since pyiceberg's v3 model refuses to write itself
    although its fields (row lineage: ``next-row-id``, snapshots' ``first-row-id`` and
    ``added-rows``) round-trip unchanged. icefloe's own writers refuse v3 tables (``catalog.v3``)."""
    if metadata.format_version >= 3:
        if getattr(metadata, "next_row_id", 0) is None:
            # Required in v3 (Iceberg Java refuses metadata without it); pyiceberg leaves it
            # unset on a new table: no row has an id yet, so the next one is 0.
            metadata = metadata.model_copy(update={"next_row_id": 0})
        return IcebergBaseModel.model_dump_json(metadata)
    return metadata.model_dump_json()


def metadata_json(metadata: TableMetadata) -> str:
    """The JSON pyiceberg writes for ``metadata`` (``model_dump_json()``), built faster."""
    if not metadata.snapshots:
        return dump_metadata(metadata)
    rest = dump_metadata(metadata.model_copy(update={"snapshots": []}))
    if rest.count(_EMPTY) != 1:  # a layout this splice does not know: the plain way
        return dump_metadata(metadata)
    table = str(metadata.table_uuid)
    snapshots = ",".join(_snapshot_json(table, snapshot) for snapshot in metadata.snapshots)
    return rest.replace(_EMPTY, f'"snapshots":[{snapshots}]')


def write_metadata(metadata: TableMetadata, io: FileIO, location: str) -> None:
    """Write ``metadata`` to a new file at ``location`` (compressed as its name says)."""
    data = Compressor.get_compressor(location).bytes_compressor()(metadata_json(metadata).encode("utf-8"))
    write_new(io, location, data)  # durable as through the io (or in the caller's deferred_fsync)


def _snapshot_json(table: str, snapshot: Snapshot) -> str:
    key = (table, snapshot.snapshot_id, snapshot.manifest_list)
    text = _texts.get(key)
    if text is None:
        text = snapshot.model_dump_json()
        _texts.put(key, text)
    return text
