"""``icefloe status``: what a running server says about itself (DoAction ``icefloe.status``, admin)."""

from __future__ import annotations

import json
from typing import Any

import click
import pyarrow as pa
import pyarrow.flight as flight

from flight_server.cli.connect import Connection, clean_error

STATUS_TIMEOUT_S = 30.0


def fetch_status(conn: Connection) -> dict[str, Any]:
    """The server's status JSON.

    Raises:
        click.ClickException: The server could not be reached, refused, or answered nonsense.
    """
    client = conn.client()
    try:
        results = list(client.do_action(flight.Action("icefloe.status", b""), conn.options(STATUS_TIMEOUT_S)))
    except (flight.FlightError, pa.ArrowException) as exc:
        raise click.ClickException(clean_error(exc, conn.uri)) from None
    finally:
        client.close()
    try:
        body = json.loads(results[0].body.to_pybytes())
        if not isinstance(body, dict):
            raise ValueError
    except (IndexError, ValueError):
        raise click.ClickException("the server's status answer is not a JSON object") from None
    return body


def _uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return (f"{days}d " if days else "") + f"{hours:02d}:{minutes:02d}:{secs:02d}"


def render(status: dict[str, Any]) -> str:
    """The status as lines for a terminal."""
    feed = status.get("feed_subscribers") or {}
    lineage = status.get("lineage") or {}
    health = status.get("health") or {}
    queries = status.get("queries") or {}
    lines = [
        f"icefloe {status.get('version')}  up {_uptime(float(status.get('uptime_s') or 0))} "
        f"(since {status.get('started_at')})",
        f"ready:        {'yes' if health.get('ready') else 'no'}  "
        + "  ".join(f"{k}={v}" for k, v in (health.get("checks") or {}).items()),
        f"commit head:  {status.get('commit_head')} (log starts at {status.get('log_start')})",
        f"subscribers:  {feed.get('live', 0) + feed.get('log', 0)} "
        f"({feed.get('live', 0)} live, {feed.get('log', 0)} catching up from the log)",
        f"lineage:      {lineage.get('state')}, outbox {lineage.get('outbox_depth')}, "
        f"dead letters {lineage.get('dead_letters')}",
        f"queries:      {queries.get('running', 0)} running, {queries.get('queued', 0)} queued",
    ]
    tables = status.get("tables") or []
    lines.append(f"tables:       {len(tables)}")
    if tables:
        width = max(len(str(t.get("name"))) for t in tables)
        for t in tables:
            last = t.get("last_commit") or {}
            commit = f"#{last.get('seq')} {last.get('operation')} {last.get('committed_at')}" if last else ""
            rows = "?" if t.get("rows") is None else str(t.get("rows"))
            lines.append(f"  {str(t.get('name')).ljust(width)}  {rows:>12} rows  {commit}")
    return "\n".join(lines)
