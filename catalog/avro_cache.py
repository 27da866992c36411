"""Share pyiceberg's per-file Avro set-up between files with the same schema.

Each manifest pyiceberg opens re-parses the Avro schema in its header into an Iceberg schema
and builds a reader tree for it, although a table's manifests share one or two schemas. With a
manifest per append, compaction reads ~17 manifests two or three times, and that set-up was
about a third of its time (cProfile: ``avro_to_iceberg`` and ``resolve_reader``, 34 of 95 ms)
— time it holds the GIL while the feed's writes to subscribers wait (bench_feed). Schemas and
readers do not change once built (readers create a new struct per record), so sharing them is
safe. ``install`` is idempotent; it leaves pyiceberg alone if its internals have moved.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("icefloe.catalog.avro_cache")

CACHE_SIZE = 256

_installed = False
_install_lock = threading.Lock()


def install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True
        try:
            import pyiceberg.avro.file as avro_file
            from pyiceberg.utils.schema_conversion import AvroSchemaConversion

            schema_key = avro_file._SCHEMA_KEY
            header_class = avro_file.AvroFileHeader
            resolve_reader = getattr(avro_file, "resolve_reader")  # noqa: B009
        except (ImportError, AttributeError):  # another pyiceberg layout: run without caches
            logger.warning("pyiceberg's Avro internals have moved; manifest reads are not cached")
            return

        @functools.lru_cache(maxsize=CACHE_SIZE)
        def schema_from_avro(avro_schema: str) -> Any:
            return AvroSchemaConversion().avro_to_iceberg(json.loads(avro_schema))

        def get_schema(self: Any) -> Any:
            if schema_key in self.meta:
                return schema_from_avro(self.meta[schema_key])
            raise ValueError("No schema found in Avro file headers")

        # setattr: these replace library attributes on purpose (see the module docstring).
        setattr(header_class, "get_schema", get_schema)  # noqa: B010
        setattr(avro_file, "resolve_reader", _cached_readers(resolve_reader))  # noqa: B010


def _cached_readers(resolve_reader: Callable[..., Any]) -> Callable[..., Any]:
    """``resolve_reader`` remembering its result per (file schema, read schema, types, enums)."""
    readers: OrderedDict[tuple[Any, ...], tuple[Any, Any, Any]] = OrderedDict()
    lock = threading.Lock()

    def cached(file_schema: Any, read_schema: Any, read_types: Any = None, read_enums: Any = None) -> Any:
        types, enums = read_types or {}, read_enums or {}
        # Schemas are keyed by identity (the file schema comes from the cache above; read
        # schemas are pyiceberg constants) and kept alive with the entry so an id is never
        # reused while cached.
        key = (id(file_schema), id(read_schema), tuple(types.items()), tuple(enums.items()))
        with lock:
            hit = readers.get(key)
            if hit is not None and hit[0] is file_schema and hit[1] is read_schema:
                readers.move_to_end(key)
                return hit[2]
        reader = resolve_reader(file_schema, read_schema, types, enums)
        with lock:
            readers[key] = (file_schema, read_schema, reader)
            while len(readers) > CACHE_SIZE:
                readers.popitem(last=False)
        return reader

    return cached
