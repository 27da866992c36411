"""The REST spec's view requirements and updates, applied to ``pyiceberg.view`` metadata.

pyiceberg 0.12 models view metadata but not view updates, so they are parsed and applied
here, following Iceberg-Java's ``ViewMetadata.Builder``: an added schema or version equal to
an existing one reuses its id (a REPLACE that changes nothing adds nothing), otherwise the
next free id; ``-1`` names the last one added; making a version current appends to the
version log. Errors are ``ViewUpdateError`` (400) or ``CommitFailedException`` (409).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

from catalog.names import check_properties

VIEW_FORMAT_VERSION = 1


class ViewUpdateError(ValueError):
    """An update a view cannot take (a 400 over REST)."""


class InvalidViewVersionError(ViewUpdateError):
    """A view version Iceberg-Java's builder refuses (Java clients expect its type and wording:
    a 400 with type ``IllegalArgumentException``)."""

LAST_ADDED = -1
MAX_VERSIONS = 10  # Iceberg's version.history.num-entries default: older versions drop out


def check_requirement(requirement: Any, base: ViewMetadata) -> None:
    """The only view requirement the spec has: ``assert-view-uuid`` (Java's wording)."""
    if not isinstance(requirement, dict) or requirement.get("type") != "assert-view-uuid":
        kind = requirement.get("type") if isinstance(requirement, dict) else None
        raise ViewUpdateError(f"unsupported view requirement type {str(kind)[:64]!r}")
    expected = requirement.get("uuid")
    if not isinstance(expected, str) or expected.lower() != base.view_uuid.lower():
        raise CommitFailedException(
            f"Requirement failed: view UUID does not match: expected {base.view_uuid} != {str(expected)[:64]}")


def _model(model: Any, raw: Any, what: str) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"msg": "invalid"}
        raise ViewUpdateError(f"{what} is invalid: {first['msg']}") from None
    except (ValueError, TypeError, AttributeError, KeyError):
        raise ViewUpdateError(f"{what} is invalid") from None


def check_version(version: ViewVersion) -> None:
    """Refuse a version with two queries in one dialect (Iceberg-Java's check and wording)."""
    seen: set[str] = set()
    for representation in version.representations:
        sql = getattr(representation, "root", representation)  # pyiceberg wraps each in a RootModel
        dialect = str(getattr(sql, "dialect", "")).lower()
        if dialect in seen:
            raise InvalidViewVersionError(f"Invalid view version: Cannot add multiple queries for dialect {dialect}")
        seen.add(dialect)


def _same_version(a: ViewVersion, b: ViewVersion) -> bool:
    # Java's sameViewVersion: what the version says, not when or with which id
    return (a.schema_id, a.representations, a.default_namespace, a.default_catalog, a.summary) == (
        b.schema_id, b.representations, b.default_namespace, b.default_catalog, b.summary)


def apply(base: ViewMetadata, updates: Sequence[Any]) -> ViewMetadata:
    """``base`` with ``updates`` (JSON objects of the REST spec) applied."""
    schemas = list(base.schemas)
    versions = list(base.versions)
    log = list(base.version_log)
    properties = dict(base.properties)
    location = base.location
    current = base.current_version_id
    last_schema: int | None = None
    last_version: int | None = None
    for index, update in enumerate(updates):
        what = f"updates[{index}]"
        if not isinstance(update, dict):
            raise ViewUpdateError(f"{what} must be a JSON object")
        action = update.get("action")
        if action == "assign-uuid":
            if str(update.get("uuid", "")).lower() != base.view_uuid.lower():
                raise ViewUpdateError("a view's UUID cannot change")
        elif action == "upgrade-format-version":
            if update.get("format-version") != VIEW_FORMAT_VERSION:
                raise ViewUpdateError(f"view format version must be {VIEW_FORMAT_VERSION}")
        elif action == "add-schema":
            schema = _model(Schema, update.get("schema"), f"{what}.schema")
            same = next((s.schema_id for s in schemas if s == schema), None)
            if same is None:
                same = max((s.schema_id for s in schemas), default=-1) + 1
                schemas.append(Schema(*schema.fields, schema_id=same,
                                      identifier_field_ids=list(schema.identifier_field_ids)))
            last_schema = same
        elif action == "set-location":
            if not isinstance(update.get("location"), str) or not update["location"]:
                raise ViewUpdateError(f"{what}.location must be a string")
            location = update["location"].rstrip("/")
        elif action == "set-properties":
            raw = update.get("updates")
            if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
                raise ViewUpdateError(f"{what}.updates must be an object of strings")
            properties.update(check_properties(raw, "view"))
        elif action == "remove-properties":
            raw = update.get("removals")
            if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
                raise ViewUpdateError(f"{what}.removals must be an array of strings")
            for key in raw:
                properties.pop(key, None)
        elif action == "add-view-version":
            version = _model(ViewVersion, update.get("view-version"), f"{what}.view-version")
            check_version(version)
            if version.schema_id == LAST_ADDED:
                if last_schema is None:
                    raise ViewUpdateError("a view version names the last added schema, but none was added")
                version = version.model_copy(update={"schema_id": last_schema})
            if not any(s.schema_id == version.schema_id for s in schemas):
                raise ViewUpdateError(f"view version names schema {version.schema_id}, which the view does not have")
            same = next((v.version_id for v in versions if _same_version(v, version)), None)
            if same is None:
                same = max((v.version_id for v in versions), default=0) + 1
                versions.append(version.model_copy(update={"version_id": same}))
            last_version = same
        elif action == "set-current-view-version":
            target = update.get("view-version-id")
            if target == LAST_ADDED:
                if last_version is None:
                    raise ViewUpdateError("set-current-view-version -1, but no view version was added")
                target = last_version
            if not isinstance(target, int) or not any(v.version_id == target for v in versions):
                raise ViewUpdateError(f"view has no version {str(target)[:20]}")
            if target != current:
                current = target
                log.append(ViewHistoryEntry(**{"timestamp-ms": int(time.time() * 1000), "version-id": target}))
        else:
            raise ViewUpdateError(f"{what}: unsupported view update action {str(action)[:64]!r}")
    # Bounded history, as Java's version.history.num-entries: the current version always stays.
    if len(versions) > MAX_VERSIONS:
        keep = {v.version_id for v in versions[-MAX_VERSIONS:]} | {current}
        versions = [v for v in versions if v.version_id in keep]
        log = [entry for entry in log if entry.version_id in keep]
    return base.model_copy(update={"schemas": schemas, "versions": versions, "version_log": log,
                                   "properties": properties, "location": location, "current_version_id": current})
