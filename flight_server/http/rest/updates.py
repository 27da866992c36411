"""Requirements and updates of a REST commit: JSON in, pyiceberg's models out.

The JSON names (``action``, ``type`` and their fields) are the REST spec's; pyiceberg models
them with the same names, so its pydantic models parse them. Around that, what a server must
refuse and a library does not: an action it does not know (400 naming it, never a crash), and
any location outside the warehouse (``set-location``, a snapshot's ``manifest-list``, a
created table's ``location``), since the server itself later reads the files metadata points
at. A table whose schema policy is ``strict`` refuses schema changes, as its appends do.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AddSnapshotUpdate,
    SetCurrentSchemaUpdate,
    SetLocationUpdate,
    TableRequirement,
    TableUpdate,
)

from catalog.sandbox import Warehouse
from catalog.schema_policy import STRICT, SchemaMismatchError, policy_of
from flight_server.http.rest.errors import RestError, bad_request, validation_message

MAX_CHANGES = 10_000  # updates or requirements in one commit


def _tags(annotated: Any, field: str) -> frozenset[str]:
    union = typing.get_args(annotated)[0]
    return frozenset(member.model_fields[field].default for member in typing.get_args(union))


UPDATE_ACTIONS = _tags(TableUpdate, "action")
REQUIREMENT_TYPES = _tags(TableRequirement, "type")
_UPDATE = TypeAdapter(TableUpdate)
_REQUIREMENT = TypeAdapter(TableRequirement)


def _items(raw: Any, what: str) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request(f"{what} must be a JSON array")
    if len(raw) > MAX_CHANGES:
        raise bad_request(f"too many {what} in one commit (at most {MAX_CHANGES})")
    if not all(isinstance(item, dict) for item in raw):
        raise bad_request(f"every entry of {what} must be a JSON object")
    return raw


def _parse(adapter: TypeAdapter[Any], item: dict[str, Any], what: str, index: int) -> Any:
    try:
        return adapter.validate_python(item)
    except ValidationError as exc:
        raise bad_request(validation_message(exc, f"{what}[{index}]", skip=1)) from None
    except IcebergValidationError as exc:  # pyiceberg's own type parsing: "decimal(99, 2)", "fixed[-1]"
        raise bad_request(f"{what}[{index}] is invalid: {str(exc)[:300]}") from None
    except (AttributeError, TypeError):  # a model's own validator tripped over a wrong JSON type
        raise bad_request(f"{what}[{index}] is invalid: a field has the wrong JSON type") from None
    except KeyError as exc:  # a model's own validator read a field that is missing
        raise bad_request(f"{what}[{index}] is invalid: field {str(exc.args[0])[:64]!r} is missing") from None


def parse_updates(raw: Any) -> tuple[TableUpdate, ...]:
    """The updates of a commit.

    Raises:
        RestError: 400 for a malformed entry or an action this server does not know.
    """
    parsed: list[TableUpdate] = []
    for index, item in enumerate(_items(raw, "updates")):
        action = item.get("action")
        # isinstance first: a list or object is unhashable, and `in` a frozenset would raise
        if not isinstance(action, str) or action not in UPDATE_ACTIONS:
            raise bad_request(f"updates[{index}]: unsupported update action {str(action)[:64]!r}")
        values = item.get("updates")
        if action == "set-properties" and isinstance(values, dict) and \
                not all(isinstance(value, str) for value in values.values()):
            # pyiceberg would turn 1, true or {"a": 1} into text; the spec's values are strings
            raise bad_request(f"updates[{index}]: set-properties values must be strings")
        parsed.append(_parse(_UPDATE, item, "updates", index))
    return tuple(parsed)


def parse_requirements(raw: Any) -> tuple[TableRequirement, ...]:
    """The requirements of a commit.

    Raises:
        RestError: 400 for a malformed entry or a requirement type this server does not know.
    """
    parsed: list[TableRequirement] = []
    for index, item in enumerate(_items(raw, "requirements")):
        kind = item.get("type")
        if not isinstance(kind, str) or kind not in REQUIREMENT_TYPES:
            raise bad_request(f"requirements[{index}]: unsupported requirement type {str(kind)[:64]!r}")
        parsed.append(_parse(_REQUIREMENT, item, "requirements", index))
    return tuple(parsed)


class Locations:
    """Refuses, early and with a REST error, locations a client names outside the warehouse.

    The rules are the catalog's (``catalog.sandbox.Warehouse``: real paths, reserved entries);
    the catalog applies them again, with the table's own folder, before anything lands.

    Args:
        warehouse: The catalog's warehouse rules (``RocksCatalog.files``).
    """

    def __init__(self, warehouse: Warehouse) -> None:
        self._warehouse = warehouse

    def check(self, location: str, what: str) -> None:
        """Raise 400 unless ``location`` is the warehouse or inside it."""
        if not self._warehouse.inside(location):
            raise bad_request(f"{what} must lie inside the catalog's warehouse")

    def check_updates(self, updates: tuple[TableUpdate, ...]) -> None:
        """Refuse updates that would point the table at files outside the warehouse."""
        for update in updates:
            if isinstance(update, SetLocationUpdate):
                self.check(update.location, "set-location")
            elif isinstance(update, AddSnapshotUpdate):
                self.check(update.snapshot.manifest_list, "a snapshot's manifest-list")


def check_schema_policy(properties: dict[str, str], updates: tuple[TableUpdate, ...], table: str) -> None:
    """A ``strict`` table refuses schema changes (set the policy to ``evolve`` first).

    Raises:
        RestError: 400 for a schema change of a strict table, or an invalid policy property.
    """
    if not any(isinstance(u, (AddSchemaUpdate, SetCurrentSchemaUpdate)) for u in updates):
        return
    try:
        policy = policy_of(properties)
    except SchemaMismatchError as exc:
        raise bad_request(str(exc)) from None
    if policy == STRICT:
        raise RestError(
            400, "BadRequestException",
            f"table {table} has schema policy strict: schema changes are refused (set icefloe.schema-policy=evolve)",
        )
