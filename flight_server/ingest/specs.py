"""Connector definitions: what ``icefloe ingest add`` and the server config declare.

A definition names the connector, its target table, its source kind and the source's options.
Definitions added over Flight are kept in RocksDB (``ing/def/<name>``, JSON); definitions from
the server config file (``--ingest-config``) live in that file and are read at start. Both run
the same way. Only the config file may name a connector class of the operator's own
(``source = "package.module:Class"``): a client never makes the server import code.
"""

from __future__ import annotations

import importlib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog.ingest_checkpoints import BACKFILL_INFIX, InvalidIngestCommit, check_connector_name
from catalog.names import InvalidNameError, check_name, check_namespace
from catalog.schema_policy import check_policy
from icefloe.ingest.contract import Connector, InvalidOptions
from icefloe.ingest.files import FilesConnector
from icefloe.ingest.http_json import HttpJsonConnector
from icefloe.ingest.postgres_cdc import PostgresCdcConnector

BUILT_IN: dict[str, type[Connector]] = {"files": FilesConnector, "http": HttpJsonConnector,
                                         "postgres": PostgresCdcConnector}
MAX_NAME = 100
SPEC_FIELDS = {"name", "table", "source", "options", "schema_policy", "max_rows", "poll_s", "paused"}
# A connector that feeds several tables (postgres ``tables``) names them in this option.
TABLES_OPTION = "tables"


class InvalidSpec(ValueError):
    """A connector definition that cannot be used (the message says why)."""


@dataclass(frozen=True)
class ConnectorSpec:
    """One connector definition.

    Attributes:
        name: Its name (``[A-Za-z0-9_-]``, at most 100 characters); also its checkpoint's name.
        table: The target table ``ns.t`` (it must exist).
        source: ``files``, ``http``, or (config file only) ``package.module:Class``.
        options: The source's options.
        schema_policy: This connector's schema policy (None: the table's).
        max_rows: Rows per commit (soft).
        poll_s: Seconds between passes when the source has nothing new.
        origin: ``api`` (added over Flight, kept in RocksDB) or ``config`` (the config file).
        principal: Who added it (recorded on its commits).
        tables: Every target of a connector feeding several tables (``options.tables``, source ->
            target); ``table`` is then the first of them. Empty: the one ``table``.
    """

    name: str
    table: str
    source: str
    options: Mapping[str, Any] = field(default_factory=dict)
    schema_policy: str | None = None
    max_rows: int = 1_000_000
    poll_s: float = 1.0
    origin: str = "api"
    principal: str | None = None
    tables: tuple[str, ...] = ()

    @property
    def targets(self) -> tuple[str, ...]:
        return self.tables or (self.table,)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "table": self.table, "source": self.source, "options": dict(self.options),
                "schema_policy": self.schema_policy, "max_rows": self.max_rows, "poll_s": self.poll_s,
                "origin": self.origin, "principal": self.principal, "tables": list(self.tables)}

    def connector(self) -> Connector:
        """A new connector for this definition.

        Raises:
            InvalidSpec: The source kind or its options are not valid.
        """
        cls = BUILT_IN.get(self.source)
        if cls is None:
            if self.origin != "config" or ":" not in self.source:
                raise InvalidSpec(f"unknown source {self.source!r}; one of {', '.join(sorted(BUILT_IN))}")
            cls = _load_class(self.source)
        try:
            return cls(self.options)
        except InvalidOptions as exc:
            raise InvalidSpec(str(exc)) from None


def parse_spec(raw: Any, origin: str = "api", principal: str | None = None) -> ConnectorSpec:
    """A definition from JSON or TOML values, checked.

    Raises:
        InvalidSpec: Anything malformed (the message says what).
    """
    usage = ('a connector is {"name": "orders", "table": "ns.t", "source": "files", "options": {"path": "/data"}}')
    if not isinstance(raw, Mapping):
        raise InvalidSpec(usage)
    unknown = set(raw) - SPEC_FIELDS
    if unknown:
        raise InvalidSpec(f"unknown field(s) {sorted(unknown)}; {usage}")
    name, table, source = raw.get("name"), raw.get("table"), raw.get("source")
    try:
        check_connector_name(name if isinstance(name, str) and len(name) <= MAX_NAME else "-")
    except InvalidIngestCommit:
        raise InvalidSpec(f"a connector name must be 1-{MAX_NAME} characters of A-Z a-z 0-9 _ - "
                          "(not starting with -)") from None
    if isinstance(name, str) and BACKFILL_INFIX in name:  # backfills' checkpoint names are made that way
        raise InvalidSpec(f"a connector name may not contain {BACKFILL_INFIX!r}")
    options = raw.get("options", {})
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise InvalidSpec("options must be an object of option name -> value")
    mapping = options.get(TABLES_OPTION)
    targets: tuple[str, ...] = ()
    if isinstance(mapping, Mapping) and mapping:
        targets = tuple(str(t) for t in mapping.values())
        if table is None:
            table = targets[0]
        elif table not in targets:
            raise InvalidSpec(f"table {table!r} is not one of the targets in options.{TABLES_OPTION}")
    if not isinstance(table, str):
        raise InvalidSpec(f"table must be a table name ns.t; {usage}")
    for name_ in (table, *targets):
        _check_table_name(name_)
    if not isinstance(source, str) or not source:
        raise InvalidSpec(f"source must be one of {', '.join(sorted(BUILT_IN))}")
    policy = raw.get("schema_policy")
    if policy is not None:
        try:
            policy = check_policy(policy)
        except ValueError as exc:
            raise InvalidSpec(str(exc)) from None
    max_rows, poll_s = raw.get("max_rows", 1_000_000), raw.get("poll_s", 1.0)
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or not 1 <= max_rows <= 100_000_000:
        raise InvalidSpec("max_rows must be an integer from 1 to 100000000")
    if isinstance(poll_s, bool) or not isinstance(poll_s, int | float) or not 0.01 <= poll_s <= 86400:
        raise InvalidSpec("poll_s must be a number of seconds from 0.01 to 86400")
    assert isinstance(name, str)
    spec = ConnectorSpec(name, table, source, dict(options), policy, max_rows, float(poll_s), origin, principal,
                         targets)
    spec.connector().close()  # options checked now, not when it first runs
    return spec


def _check_table_name(table: str) -> None:
    parts = table.split(".")
    try:
        if len(parts) < 2:
            raise InvalidNameError("table must be a table name ns.t")
        check_namespace(tuple(parts[:-1]))
        check_name(parts[-1], "table")
    except InvalidNameError as exc:
        raise InvalidSpec(f"table: {exc}") from None


def load_config(path: str) -> list[ConnectorSpec]:
    """The connectors of a server config file (TOML, ``[connectors.NAME]`` tables).

    Raises:
        InvalidSpec: The file is unreadable or a connector in it is malformed.
    """
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise InvalidSpec(f"cannot read the ingest config {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidSpec(f"the ingest config {path} is not valid TOML: {exc}") from None
    connectors = document.get("connectors", {})
    unknown = set(document) - {"connectors"}
    if unknown or not isinstance(connectors, dict):
        raise InvalidSpec(f"the ingest config {path} holds [connectors.NAME] tables only")
    specs = []
    for name, body in connectors.items():
        if not isinstance(body, dict):
            raise InvalidSpec(f"[connectors.{name}] must be a table")
        try:
            specs.append(parse_spec({**body, "name": name}, origin="config"))
        except InvalidSpec as exc:
            raise InvalidSpec(f"[connectors.{name}] in {path}: {exc}") from None
    return specs


def encode(spec: ConnectorSpec) -> bytes:
    return json.dumps(spec.to_json(), separators=(",", ":")).encode("utf-8")


def decode(raw: bytes) -> ConnectorSpec:
    body = json.loads(raw)
    return ConnectorSpec(body["name"], body["table"], body["source"], body.get("options") or {},
                         body.get("schema_policy"), int(body.get("max_rows", 1_000_000)),
                         float(body.get("poll_s", 1.0)), body.get("origin", "api"), body.get("principal"),
                         tuple(body.get("tables") or ()))


def source_path_inside(spec: ConnectorSpec, forbidden: list[str]) -> bool:
    """Whether a files connector's local folder is (or is inside, or holds) one of ``forbidden``
    (the warehouse, the catalog): the server's own files are never a source."""
    path = spec.options.get("path")
    if spec.source != "files" or not isinstance(path, str) or "://" in path:
        return False
    real = os.path.realpath(path)
    for other in forbidden:
        other_real = os.path.realpath(other)
        if real == other_real or real.startswith(other_real + os.sep) or other_real.startswith(real + os.sep):
            return True
    return False


def _load_class(source: str) -> type[Connector]:
    module_name, _, class_name = source.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise InvalidSpec(f"cannot load connector class {source}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Connector)):
        raise InvalidSpec(f"{source} is not an icefloe.ingest.Connector subclass")
    return cls
