"""Two-phase appends on the Flight surface (DESIGN.md, "Plain Flight appends").

- ``DoPut`` on a path descriptor with header ``x-icefloe-stage: <job-id>`` stages the stream
  (``catalog.two_phase``) and answers ``{"table", "rows", "token", "job", "files", "bytes",
  "staged": true}``. The token is the staging, sealed with the warehouse's handle key
  (purpose ``stage``): any server on the warehouse can commit it, no client can forge or
  alter one, and it names no server path.
- ``DoAction("icefloe.commit-staged", {"table", "tokens", "idempotency_key", "mode"})`` commits
  the tokens' files as one snapshot; the answer is the commit JSON a DoPut gives (plus
  ``"mode"``). ``mode`` is ``"append"`` (the default) or ``"overwrite"``: the same one snapshot
  (operation ``overwrite``) also removes every row the table held, so a reader sees the old rows
  or the new ones, never an empty or doubled table; ``tokens`` may then be empty (empty the
  table).
- ``DoAction("icefloe.abort-staged", {"table", "tokens"})`` deletes them.

A token commits only as the principal that staged it (or an admin), into the table it was
staged for (same name and table UUID: a dropped and re-created table refuses it).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.flight as flight

from catalog.context import commit_context
from catalog.staging import (
    StagedAlreadyCommitted,
    StagedAppend,
    StagedIncompatible,
    StagedNotFound,
    StagingError,
    check_job,
)
from catalog.two_phase import TwoPhaseAppends
from flight_server import errors
from flight_server.append_streams import client_errors
from flight_server.security import roles
from flight_server.security.auth import MIDDLEWARE_KEY as AUTH_MIDDLEWARE_KEY
from flight_server.security.handles import HandleSigner

if TYPE_CHECKING:
    from catalog.append import Appender
    from catalog.lineage import LineageExporter

logger = logging.getLogger("icefloe.staged_appends")

PURPOSE = "stage"
COMMIT_ACTION = "icefloe.commit-staged"
ABORT_ACTION = "icefloe.abort-staged"
MAX_BODY_BYTES = 64 * 1024 * 1024  # 10,000 tokens of a few hundred bytes each fit easily
_COMMIT_USAGE = ('{"table": "ns.t", "tokens": ["<staging token>", ...], "idempotency_key": "<key>", '
                 '"mode": "append" | "overwrite"}')
MODES = ("append", "overwrite")
_ABORT_USAGE = '{"table": "ns.t", "tokens": ["<staging token>", ...]}'


class StagedAppendService:
    """Stage DoPuts and the commit / abort actions.

    Args:
        appender: The warehouse's appender (its commit slots and idempotency keys).
        signer: Seals and opens staging tokens.
        lineage: Tracks each commit and abort call as a lineage run (a failure is a FAIL run).
    """

    ACTIONS = (COMMIT_ACTION, ABORT_ACTION)

    def __init__(self, appender: Appender, signer: HandleSigner, lineage: LineageExporter) -> None:
        self._two_phase = TwoPhaseAppends(appender)
        self._signer = signer
        self._lineage = lineage

    # -- DoPut with x-icefloe-stage ----------------------------------------------------------

    def stage(self, identifier: tuple[str, ...], reader: Any, batches: Iterator[pa.RecordBatch], job: str,
              principal: str | None, schema_policy: str | None = None) -> dict[str, Any]:
        """Stage one DoPut stream; return its PutResult JSON (with the sealed token).
        ``schema_policy``: the call's own (header ``x-icefloe-schema-policy``), None for the table's."""
        qualified = ".".join(identifier)
        try:
            schema = reader.schema
        except Exception:
            raise errors.InvalidArgument("the DoPut stream carries no schema") from None
        with client_errors(identifier, "job id", "; nothing was staged"), commit_context(principal=principal):
            staged = self._two_phase.stage_stream(identifier, schema, batches, job, schema_policy)
        token = self._signer.seal(PURPOSE, _encode(staged.to_json())).decode("ascii")
        logger.debug("staged %d rows in %d files for %s (job %s)", staged.rows, staged.files, qualified, job)
        return {
            "table": qualified, "rows": staged.rows, "token": token, "job": job,
            "files": staged.files, "bytes": staged.bytes, "staged": True,
        }

    # -- DoAction --------------------------------------------------------------------------

    def do_action(self, context: flight.ServerCallContext, action: flight.Action,
                  principal: str | None) -> Iterator[bytes]:
        commit = action.type == COMMIT_ACTION
        body = _body(action, _COMMIT_USAGE if commit else _ABORT_USAGE)
        return iter([json.dumps(self.run(context, commit, body, principal)).encode("utf-8")])

    def run(self, context: flight.ServerCallContext, commit: bool, body: dict[str, Any],
            principal: str | None) -> dict[str, Any]:
        """Commit (or abort) the tokens of an action body; return the answer's JSON object.

        Raises:
            errors.InvalidArgument: A malformed body, a forged or foreign token, an unknown mode.
            errors.PermissionDenied: A token staged by another user (and the caller is no admin).
            errors.NotFound: The table, or a staging, no longer exists.
            errors.FailedPrecondition: A staging was committed already, or no longer fits the table.
        """
        identifier = table_identifier(body.get("table"))
        mode = body.get("mode", "append") if commit else "append"
        if mode not in MODES:
            raise errors.InvalidArgument(f'"mode" must be one of {", ".join(MODES)}; nothing was committed')
        tokens = _tokens(body.get("tokens"), allow_empty=mode == "overwrite")
        stagings = [self._open(token, identifier, context, principal) for token in tokens]
        key = body.get("idempotency_key")
        if key is not None and not isinstance(key, str):
            raise errors.InvalidArgument('"idempotency_key" must be a string')
        with client_errors(identifier, "idempotency key"), _staging_errors():
            if commit:
                tracked = self._lineage.track_write(identifier[:-1], identifier[-1], mode, principal=principal)
                with tracked, commit_context(principal=principal):
                    result: dict[str, Any] = self._two_phase.commit_staged(
                        identifier, stagings, key, mode == "overwrite"
                    ).to_json()
                result["mode"] = mode
                return result
            return self._two_phase.abort_staged(identifier, stagings)

    def job_tokens(self, identifier: tuple[str, ...], job: str, context: flight.ServerCallContext,
                   principal: str | None, committed: bool) -> list[str]:
        """Tokens of the stagings the caller made under job id ``job`` for the table (an admin:
        everyone's), oldest first: what SQL clients, which never see a staging token (ADBC bulk
        ingest answers a row count), commit or abort by job. ``committed``: include the ones
        committed already (a commit: its retry answers the first result, or is refused as
        committed under another key; an abort leaves them out).

        Raises:
            errors.InvalidArgument: A malformed job id.
            errors.NotFound: No such staging is recorded.
        """
        try:
            check_job(job)
        except ValueError as exc:
            raise errors.InvalidArgument(str(exc)) from None
        everyone = _is_admin(context)
        found = [staged for staged, done in self._two_phase.records.of_job(identifier[:-1], identifier[-1], job)
                 if (everyone or staged.principal == principal) and (committed or not done)]
        if not found:
            raise errors.NotFound(
                f"no staged appends of job {job!r} for table {'.'.join(identifier)}"
                + ("" if everyone else " by this user")
                + " (aborted, removed after the orphan grace period, or never staged)"
            )
        return [self._signer.seal(PURPOSE, _encode(staged.to_json())).decode("ascii") for staged in found]

    def list_actions(self) -> list[tuple[str, str]]:
        return [
            (COMMIT_ACTION, "Commit staged appends as one snapshot (mode overwrite: replacing the table's rows), "
                            "exactly once per key. Body: " + _COMMIT_USAGE),
            (ABORT_ACTION, "Delete staged appends. Body: " + _ABORT_USAGE),
        ]

    def _open(self, token: str, identifier: tuple[str, ...], context: flight.ServerCallContext,
              principal: str | None) -> StagedAppend:
        body = self._signer.open(PURPOSE, token.encode("utf-8", "surrogatepass"), "staging token")
        try:
            staged = StagedAppend.from_json(json.loads(body))
        except (ValueError, TypeError, RecursionError):
            raise errors.InvalidArgument("not a valid staging token") from None
        if staged.principal != principal and not _is_admin(context):
            raise errors.PermissionDenied(
                "a staging token can be committed or aborted only by the user who staged it (or an admin)"
            )
        return staged


@contextlib.contextmanager
def _staging_errors() -> Iterator[None]:
    try:
        yield
    except StagedNotFound as exc:
        raise errors.NotFound(str(exc)) from None
    except (StagedAlreadyCommitted, StagedIncompatible) as exc:
        raise errors.FailedPrecondition(f"{exc}; nothing was committed") from None
    except StagingError as exc:
        raise errors.InvalidArgument(f"{exc}; nothing was committed") from None


def _is_admin(context: flight.ServerCallContext) -> bool:
    session = context.get_middleware(AUTH_MIDDLEWARE_KEY)
    return session is not None and session.principal.allows(roles.OTHERS_STAGED)


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=True).encode("ascii")


def _body(action: flight.Action, usage: str) -> dict[str, Any]:
    raw = action.body.to_pybytes() if action.body is not None else b""
    if len(raw) > MAX_BODY_BYTES:
        raise errors.InvalidArgument(f"{action.type} body is larger than {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw or b"null")
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise errors.InvalidArgument(f"{action.type} takes a JSON object: {usage}")
    return body


def table_identifier(value: Any) -> tuple[str, ...]:
    """A client's ``"ns.t"`` as a checked table identifier.

    Raises:
        errors.InvalidArgument: Not a string naming a table in a namespace, or a bad name.
    """
    from catalog.names import InvalidNameError, check_name, check_namespace

    if not isinstance(value, str) or "." not in value:
        raise errors.InvalidArgument('"table" must be a qualified name such as "ns.t"')
    parts = value.split(".")
    try:
        return (*check_namespace(tuple(parts[:-1])), check_name(parts[-1], "table"))
    except InvalidNameError as exc:
        raise errors.InvalidArgument(str(exc)) from None


def _tokens(value: Any, allow_empty: bool = False) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value) or not (value or allow_empty):
        kind = "a list" if allow_empty else "a non-empty list"
        raise errors.InvalidArgument(f'"tokens" must be {kind} of staging tokens (strings)')
    return value
