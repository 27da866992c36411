"""Flight SQL bulk ingest (``CommandStatementIngest``, what ADBC's ``adbc_ingest`` sends).

An ingest commits through the append service like a DoPut. With the call header
``x-icefloe-stage: <job-id>`` (ADBC: the statement or connection option
``adbc.flight.sql.rpc.call_header.x-icefloe-stage``) it is a two-phase append instead: the rows
are staged exactly as a staged DoPut stages them and nothing is committed; the answer is the
row count, and the job is committed (or aborted) later with SQL
``CALL icefloe.commit_staged('ns.t', job => '<job-id>', idempotency_key => '...')``
(``flightsql.calls``), since an ingest's answer has no room for a staging token.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pyarrow.flight as flight

from catalog.names import InvalidNameError, check_name, check_namespace
from flight_server import errors
from flight_server.append_streams import read_batches, requested_policy
from flight_server.engine import CATALOG_NAME, split_namespace
from flight_server.flightsql import protocol as p
from flight_server.security import roles
from flight_server.security.headers import IDEMPOTENCY_HEADER, STAGE_HEADER, single_header

if TYPE_CHECKING:
    from flight_server.appends import AppendService

logger = logging.getLogger("icefloe.flightsql.ingest")


def ingest_mode(if_not_exist: int, if_exists: int) -> str:
    """TableDefinitionOptions -> the append service's ingest mode (UNSPECIFIED counts as FAIL)."""
    create = if_not_exist == 1
    if if_exists == 3:
        if create:
            return "replace"
        raise errors.InvalidArgument("ingest: replacing a table requires if_not_exist = CREATE")
    if if_exists == 2:
        return "create_append" if create else "append"
    if create:
        return "create"
    raise errors.InvalidArgument("ingest: if_not_exist and if_exists are both FAIL; nothing could be written")


def ingest(appends: AppendService, context: flight.ServerCallContext, cmd: p.CommandStatementIngest,
           namespace: tuple[str, ...], reader: Any) -> int:
    """Run one bulk ingest into ``cmd.schema`` (else ``namespace``, the session's schema);
    return the rows ingested (committed, or staged under the ``x-icefloe-stage`` job).

    Raises:
        errors.InvalidArgument: A bad mode, name or stream; a staged ingest that is not an append.
        errors.NotFound: Another catalog, or (append) a missing table.
    """
    principal = appends.authorizer.authorize(context, roles.FLIGHT_COMMANDS["statement-ingest"])
    if cmd.catalog not in (None, "", CATALOG_NAME):
        raise errors.NotFound(f"catalog {cmd.catalog!r} does not exist (the catalog is {CATALOG_NAME!r})")
    if not cmd.table:
        raise errors.InvalidArgument("CommandStatementIngest needs a table name")
    opts = cmd.table_definition_options or p.TableDefinitionOptions()
    mode = ingest_mode(opts.if_not_exist, opts.if_exists)
    if cmd.schema:
        namespace = split_namespace(cmd.schema)
    options = {e.key: e.value for e in cmd.options}
    job = single_header(context, STAGE_HEADER)
    if job is not None:
        return _stage(appends, context, cmd, namespace, mode, options, reader, job, principal)
    return int(
        appends.ingest(
            context,
            namespace=namespace,
            table=cmd.table,
            mode=mode,
            temporary=cmd.temporary,
            reader=reader,
            idempotency_key=options.get("idempotency_key") or None,
        )
    )


def _stage(appends: AppendService, context: flight.ServerCallContext, cmd: p.CommandStatementIngest,
           namespace: tuple[str, ...], mode: str, options: dict[str, str], reader: Any, job: str,
           principal: str | None) -> int:
    """A staged ingest: the rows are written and fsync'd under ``job``, nothing is committed."""
    if mode != "append":
        raise errors.InvalidArgument(
            f"a staged ingest ({STAGE_HEADER}) appends to an existing table: use mode 'append'; nothing was staged"
        )
    if cmd.temporary:
        raise errors.Unimplemented("temporary tables are not supported by icefloe; ingest into a regular table")
    if options.get("idempotency_key") or single_header(context, IDEMPOTENCY_HEADER) is not None:
        raise errors.InvalidArgument(
            f"a staged ingest ({STAGE_HEADER}) takes no idempotency key: give it to icefloe.commit_staged, "
            "which commits exactly once per key; nothing was staged"
        )
    try:
        identifier = (*check_namespace(tuple(namespace)), check_name(cmd.table, "table"))
    except InvalidNameError as exc:
        raise errors.InvalidArgument(str(exc)) from None
    # The DoPut path's batch reader: full validation of every batch, cancellation, shutdown.
    batches = read_batches(reader, context, appends.stopping)
    answer = appends.staged.stage(identifier, reader, batches, job, principal, requested_policy(context))
    logger.debug("staged ingest of %d rows into %s (job %s)", answer["rows"], answer["table"], job)
    return int(answer["rows"])
