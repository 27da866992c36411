"""Resolving the OpenLineage client from the client's own conventions, refusing what is broken.

The openlineage-python client reads ``OPENLINEAGE_DISABLED``, ``OPENLINEAGE_CONFIG`` /
``openlineage.yml`` (cwd, then ``~/.openlineage``), ``OPENLINEAGE__*`` variables and
``OPENLINEAGE_URL``. It is forgiving where a server must not be: a config file it cannot read is
skipped (and the next source, possibly a different collector, is used) and no config at all
means "print to the console". Here a config that cannot be parsed disables export loudly, and
no configuration at all means export is off.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("icefloe.lineage")

# HTTP defaults used unless the user's config names its own: a collector that does not answer
# must not hold the worker (or shutdown) for long; the worker does its own backoff.
HTTP_TIMEOUT_S = 3.0
HTTP_RETRY: dict[str, Any] = {
    "total": 1,
    "read": 1,
    "connect": 1,
    "backoff_factor": 0.2,
    "status_forcelist": [500, 502, 503, 504],
    "allowed_methods": ["HEAD", "POST"],
}


@dataclass
class ResolvedClient:
    """The outcome of reading the lineage configuration."""

    state: str  # "enabled", "disabled" (asked for), "unconfigured", "invalid"
    client: Any = None  # openlineage.client.OpenLineageClient when enabled
    reason: str = ""
    transport_kind: str = ""


def _mentions(config: Any, key: str) -> bool:
    if isinstance(config, dict):
        return any(k == key or _mentions(v, key) for k, v in config.items())
    if isinstance(config, list):
        return any(_mentions(v, key) for v in config)
    return False


def _http_transports(transport: Any) -> list[Any]:
    from openlineage.client.transport.composite import CompositeTransport
    from openlineage.client.transport.http import HttpTransport

    if isinstance(transport, HttpTransport):
        return [transport]
    if isinstance(transport, CompositeTransport):
        return [t for child in transport.transports for t in _http_transports(child)]
    return []


def _check_config_file() -> str | None:
    """Reason the YAML config cannot be used, or None when it is fine (or there is none)."""
    explicit = os.environ.get("OPENLINEAGE_CONFIG")
    if explicit:
        if not os.path.isfile(explicit) or not os.access(explicit, os.R_OK):
            return "OPENLINEAGE_CONFIG names a file that does not exist or cannot be read"
        path: str | None = explicit
    else:
        path = None
        for candidate in (
            os.path.join(os.getcwd(), "openlineage.yml"),
            os.path.expanduser("~/.openlineage/openlineage.yml"),
        ):
            if os.path.isfile(candidate):
                path = candidate
                break
    if path is None:
        return None
    import yaml  # here: a server with no OpenLineage config file never needs it (~2% of a start)

    try:
        with open(path, encoding="utf-8") as fh:
            content = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        return f"OpenLineage config file cannot be parsed ({type(exc).__name__})"
    if not isinstance(content, dict):
        return "OpenLineage config file is not a mapping"
    transport = content.get("transport")
    if transport is not None and (not isinstance(transport, dict) or "type" not in transport):
        return "OpenLineage config file has a 'transport' without a 'type'"
    return None


def _configured() -> bool:
    if os.environ.get("OPENLINEAGE_URL") or os.environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(k.startswith("OPENLINEAGE__TRANSPORT") for k in os.environ):
        return True
    return any(
        os.path.isfile(p)
        for p in (os.path.join(os.getcwd(), "openlineage.yml"), os.path.expanduser("~/.openlineage/openlineage.yml"))
    )


def resolve_client() -> ResolvedClient:
    """Build the OpenLineage client the way its own conventions say, or say why not."""
    if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return ResolvedClient("disabled", reason="OPENLINEAGE_DISABLED is true")
    if not _configured():
        return ResolvedClient("unconfigured", reason="no OpenLineage transport is configured")
    problem = _check_config_file()
    if problem is not None:
        return ResolvedClient("invalid", reason=problem)
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.console import ConsoleTransport
    from openlineage.client.transport.noop import NoopTransport

    # The client aliases OPENLINEAGE_URL into OPENLINEAGE__TRANSPORT__* variables of this
    # process; put the environment back so the aliasing does not outlive the client.
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE__")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client = OpenLineageClient()
        user_transport = client.config.transport or {}
    except Exception as exc:  # a bad transport type, a missing url, an unparseable url, ...
        return ResolvedClient("invalid", reason=f"OpenLineage config cannot be used: {type(exc).__name__}: {exc}")
    finally:
        for key in [k for k in os.environ if k.startswith("OPENLINEAGE__") and k not in saved]:
            del os.environ[key]
        os.environ.update(saved)
    transport = client.transport
    if isinstance(transport, NoopTransport):
        return ResolvedClient("disabled", reason="the OpenLineage config selects the noop transport")
    if isinstance(transport, ConsoleTransport) and not _mentions(user_transport, "type"):
        # The client's fallback when nothing usable was configured: refuse rather than guess.
        return ResolvedClient("invalid", reason="the OpenLineage config names no usable transport")
    for http in _http_transports(transport):
        if not _mentions(user_transport, "timeout"):
            http.timeout = HTTP_TIMEOUT_S
        if not _mentions(user_transport, "retry") and http._session is None:
            http.config.retry = dict(HTTP_RETRY)
    return ResolvedClient("enabled", client=client, transport_kind=str(transport.kind))


def to_client_event(event: dict[str, Any]) -> Any:
    """Wrap a stored event dict in the client's RunEvent class (facets stay plain dicts)."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState

    def dataset(cls: Any, body: dict[str, Any], io_key: str) -> Any:
        kwargs: dict[str, Any] = {"facets": body.get("facets") or {}}
        if io_key in body:
            kwargs[io_key] = body[io_key]
        return cls(body["namespace"], body["name"], **kwargs)

    run = event["run"]
    job = event["job"]
    return RunEvent(
        eventType=RunState(event["eventType"]),
        eventTime=event["eventTime"],
        producer=event["producer"],
        run=Run(runId=run["runId"], facets=run.get("facets") or {}),
        job=Job(namespace=job["namespace"], name=job["name"], facets=job.get("facets") or {}),
        inputs=[dataset(InputDataset, d, "inputFacets") for d in event.get("inputs") or []],
        outputs=[dataset(OutputDataset, d, "outputFacets") for d in event.get("outputs") or []],
    )
