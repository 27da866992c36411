"""RocksDB key layout of the catalog of record.

All keys are bytes with a one-word prefix so that each kind of record sorts together and can
be scanned with a prefix iterator. Namespace levels are joined with the unit separator
(0x1F), which `names.check_name` refuses inside a name, so encodings never collide.
"""

from __future__ import annotations

import struct

SEP = "\x1f"

NAMESPACE = b"ns/"
TABLE = b"tb/"
LOG = b"log/"
META = b"meta/"
IDEMPOTENCY = b"idem/"
# Two-phase appends: one record per staging, "staged" until its commit lands (staging.py).
STAGED = b"stg/"
# Ingest connectors added over Flight (flight_server.ingest): name -> definition JSON, and
# name -> b"1" while paused (config-file connectors too). Their checkpoints are not here: they
# live in the target table's snapshots (catalog.ingest_checkpoints).
INGEST_DEFINITION = b"ing/def/"
INGEST_PAUSED = b"ing/paused/"
# A connector's position moved past its last commit through source data that held nothing for
# its tables (catalog.ingest_checkpoints.IdlePosition): name -> JSON, valid only on that commit.
INGEST_IDLE = b"ing/idle/"
HOLD = b"hold/"  # commit-log holds: name -> last processed seq (trim keeps everything after)
# Lineage outbox: built OpenLineage events waiting for delivery (commit runs and failed
# writes), keyed by runId (UUIDv7, so time ordered) + event index; undeliverable ones move to
# the dead-letter range. The lineage cursor is the commit-log hold named "lineage".
LINEAGE_OUTBOX = b"lin/out/"
LINEAGE_DEAD = b"lin/dead/"
# The lineage tables (catalog.lineage.index): one run per commit seq, one edge per (input,
# output, job), one column edge per (input column, output column); cursor: the hold "lineage-index".
LINEAGE_RUNS = b"lin/idx/run/"
LINEAGE_EDGES = b"lin/idx/edge/"
LINEAGE_COLUMNS = b"lin/idx/col/"

HEAD_SEQ = META + b"head_seq"
LOG_START = META + b"log_start"
FORMAT = META + b"format"


def encode_namespace(levels: tuple[str, ...]) -> bytes:
    return SEP.join(levels).encode("utf-8")


def decode_namespace(raw: bytes) -> tuple[str, ...]:
    return tuple(raw.decode("utf-8").split(SEP))


def namespace_key(levels: tuple[str, ...]) -> bytes:
    return NAMESPACE + encode_namespace(levels)


def table_prefix(levels: tuple[str, ...]) -> bytes:
    """Prefix of every table key in exactly this namespace (NUL ends the namespace part)."""
    return TABLE + encode_namespace(levels) + b"\x00"


def table_key(levels: tuple[str, ...], table: str) -> bytes:
    return table_prefix(levels) + table.encode("utf-8")


def decode_table_key(key: bytes) -> tuple[tuple[str, ...], str]:
    ns_raw, _, name = key[len(TABLE) :].partition(b"\x00")
    return decode_namespace(ns_raw), name.decode("utf-8")


def log_key(seq: int) -> bytes:
    # Big-endian so that byte order is numeric order.
    return LOG + struct.pack(">Q", seq)


def decode_log_key(key: bytes) -> int:
    return int(struct.unpack(">Q", key[len(LOG) :])[0])


def hold_key(name: str) -> bytes:
    return HOLD + name.encode("utf-8")


def encode_u64(value: int) -> bytes:
    return struct.pack(">Q", value)


def decode_u64(raw: bytes | None, default: int = 0) -> int:
    if raw is None:
        return default
    return int(struct.unpack(">Q", raw)[0])


def prefix_end(prefix: bytes) -> bytes:
    """Smallest key greater than every key that starts with ``prefix``."""
    as_list = bytearray(prefix)
    while as_list and as_list[-1] == 0xFF:
        as_list.pop()
    if not as_list:
        return b"\xff" * (len(prefix) + 1)
    as_list[-1] += 1
    return bytes(as_list)


LINEAGE_CURSOR = hold_key("lineage")


# Iceberg views (catalog.views): same layout as tables, their own prefix.
VIEW = b"vw/"


def view_prefix(levels: tuple[str, ...]) -> bytes:
    return VIEW + encode_namespace(levels) + b"\x00"


def view_key(levels: tuple[str, ...], view: str) -> bytes:
    return view_prefix(levels) + view.encode("utf-8")


def decode_view_key(key: bytes) -> tuple[tuple[str, ...], str]:
    ns_raw, _, name = key[len(VIEW) :].partition(b"\x00")
    return decode_namespace(ns_raw), name.decode("utf-8")
