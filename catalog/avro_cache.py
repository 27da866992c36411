"""Share pyiceberg's per-file Avro set-up between files with the same schema.

Each manifest pyiceberg opens re-parses the Avro schema in its header into an Iceberg schema
and builds a reader tree for it, although a table's manifests share one or two schemas. With a
manifest per append, compaction reads ~17 manifests two or three times, and that set-up was
about a third of its time (cProfile: ``avro_to_iceberg`` and ``resolve_reader``, 34 of 95 ms)
— time it holds the GIL while the feed's writes to subscribers wait (bench_feed). Schemas and
readers do not change once built (readers create a new struct per record), so sharing them is
safe. ``install`` is idempotent; it leaves pyiceberg alone if its internals have moved.

Writes have the same waste: every manifest and manifest list an append writes builds a writer
tree for its schema and converts that schema to Avro JSON for the header, the same few schemas
each time — together about a sixth of an append's commit (py-spy over 250 appends). Writer
trees are frozen dataclasses without state, so they are shared the same way, keyed by the
schemas' identity and then their text (manifest writers build equal schemas afresh).

The manifest writer's schemas themselves are built afresh for every manifest too:
``ManifestWriter._with_partition`` makes the manifest-entry schema for the spec's partition
type twice per manifest (file and record schema, ~150 us each), and each fresh schema then
misses the identity cache above and pays for its text key. They depend only on the format
version and the partition type, so they are kept per (format version, partition type); the
writer then hands the same schema objects to the caches above every time (py-spy over 400
sequential DoPuts: about a third of writing an append's manifest).
"""

from __future__ import annotations

import functools
import io
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from catalog.lru import LockedLRU

logger = logging.getLogger("icefloe.catalog.avro_cache")

CACHE_SIZE = 256
T = TypeVar("T")

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
            construct_writer = getattr(avro_file, "construct_writer")  # noqa: B009
            resolve_writer = getattr(avro_file, "resolve_writer")  # noqa: B009
            output_class = avro_file.AvroOutputFile
            codec_key = getattr(avro_file, "AVRO_CODEC_KEY")  # noqa: B009
            codec_mapping = getattr(avro_file, "CODEC_MAPPING_ICEBERG_TO_AVRO")  # noqa: B009
            magic, meta_schema = avro_file.MAGIC, avro_file.META_SCHEMA
            from pyiceberg.avro.encoder import BinaryEncoder as encoder_class
            from pyiceberg.manifest import (
                ManifestWriter,
                data_file_with_partition,
                manifest_entry_schema_with_data_file,
            )

            assert callable(ManifestWriter._with_partition)
        except (ImportError, AttributeError, AssertionError):  # another pyiceberg layout: run without caches
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

        # Two levels: by identity first (the manifest list's schemas are pyiceberg constants),
        # then by the schemas' text (each manifest writer builds its schema afresh).
        @functools.lru_cache(maxsize=CACHE_SIZE)
        def writer_by_text(file_schema_text: str, file_schema: _Keyless) -> Any:
            return construct_writer(file_schema=file_schema.value)

        @functools.lru_cache(maxsize=CACHE_SIZE)
        def resolved_by_text(record_text: str, file_text: str, record_schema: _Keyless, file_schema: _Keyless) -> Any:
            return resolve_writer(record_schema=record_schema.value, file_schema=file_schema.value)

        @functools.lru_cache(maxsize=CACHE_SIZE)
        def avro_json_by_text(file_schema_text: str, schema_name: str, file_schema: _Keyless) -> str:
            return json.dumps(AvroSchemaConversion().iceberg_to_avro(file_schema.value, schema_name=schema_name))

        @_by_identity
        def writer_of(file_schema: Any) -> Any:
            return writer_by_text(repr(file_schema), _Keyless(file_schema))

        @_by_identity
        def resolved_writer_of(record_schema: Any, file_schema: Any) -> Any:
            return resolved_by_text(
                repr(record_schema), repr(file_schema), _Keyless(record_schema), _Keyless(file_schema)
            )

        # pyiceberg passes these by keyword.
        def cached_construct_writer(file_schema: Any) -> Any:
            return writer_of(file_schema)

        def cached_resolve_writer(record_schema: Any, file_schema: Any) -> Any:
            return resolved_writer_of(record_schema, file_schema)

        @_by_identity
        def avro_schema_json(file_schema: Any, schema_name: str) -> str:
            # str() carries the docs that repr() leaves out; both carry ids, names and types.
            text = repr(file_schema) + str(file_schema)
            return avro_json_by_text(text, schema_name, _Keyless(file_schema))

        # A header is the magic, the metadata map and the file's sync marker. A manifest's
        # metadata (schema, spec, format version, content) is the same for every manifest of
        # a table, so its encoding is kept by the map's items; the sync marker is per file.
        encoded_headers: LockedLRU[tuple[tuple[str, str], ...], bytes] = LockedLRU(CACHE_SIZE)

        def write_header(self: Any) -> None:
            # pyiceberg's _write_header, with the schema's Avro JSON, the writers and the
            # encoded header (up to the sync marker) cached.
            from pyiceberg.table import TableProperties

            codec_name = self.metadata.get(codec_key, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
            codec_name = codec_mapping.get(codec_name, codec_name)
            json_schema = avro_schema_json(self.file_schema, self.schema_name)
            meta = {**self.metadata, schema_key: json_schema, codec_key: codec_name}
            key = tuple(meta.items())
            encoded = encoded_headers.get(key)
            if encoded is None:
                buffer = io.BytesIO()
                cached_construct_writer(meta_schema).write(
                    encoder_class(buffer), header_class(magic, meta, self.sync_bytes))
                encoded = buffer.getvalue()[: -len(self.sync_bytes)]
                encoded_headers.put(key, encoded)
            self.encoder.write(encoded)
            self.encoder.write(self.sync_bytes)

        @functools.lru_cache(maxsize=CACHE_SIZE)
        def entry_schema(format_version: Any, partition_type: Any) -> Any:  # TableVersion
            data_file = data_file_with_partition(partition_type=partition_type, format_version=format_version)
            return manifest_entry_schema_with_data_file(format_version=format_version, data_file=data_file)

        def with_partition(self: Any, format_version: int) -> Any:
            # pyiceberg's _with_partition, kept per (version, partition type): types are
            # frozen, hashable models, so equal partition types share one schema.
            return entry_schema(format_version, self._spec.partition_type(self._schema))

        setattr(ManifestWriter, "_with_partition", with_partition)  # noqa: B010
        setattr(avro_file, "construct_writer", cached_construct_writer)  # noqa: B010
        setattr(avro_file, "resolve_writer", cached_resolve_writer)  # noqa: B010
        setattr(output_class, "_write_header", write_header)  # noqa: B010
        setattr(encoder_class, "write_int", _write_int)  # noqa: B010


# Zig-zag varints of 0..127 (the lengths, counts and small ids most manifest fields hold).
_ONE_BYTE = [bytes([value]) for value in range(0x80)]


def _write_int(self: Any, integer: int) -> None:
    """pyiceberg's ``BinaryEncoder.write_int`` (zig-zag varint) in one write: pyiceberg
    writes each byte of a varint separately, and a manifest entry holds over a hundred."""
    datum = (integer << 1) ^ (integer >> 63)
    if 0 <= datum < 0x80:
        self.write(_ONE_BYTE[datum])
        return
    out = bytearray()
    while (datum & ~0x7F) != 0:
        out.append((datum & 0x7F) | 0x80)
        datum >>= 7
    out.append(datum)
    self.write(bytes(out))


class _Keyless:
    """Carries a value through an ``lru_cache`` key without taking part in it (the schema's
    text is the key; pyiceberg schemas are not hashable)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Keyless)


def _by_identity(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` remembering its result per identity of its arguments, which it keeps alive so
    an id is never reused while cached."""
    results: OrderedDict[tuple[int, ...], tuple[tuple[Any, ...], T]] = OrderedDict()
    lock = threading.Lock()

    def cached(*args: Any) -> T:
        key = tuple(id(a) for a in args)
        with lock:
            hit = results.get(key)
            if hit is not None and all(a is b for a, b in zip(hit[0], args, strict=True)):
                results.move_to_end(key)
                return hit[1]
        value = fn(*args)
        with lock:
            results[key] = (args, value)
            while len(results) > CACHE_SIZE:
                results.popitem(last=False)
        return value

    return cached


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
