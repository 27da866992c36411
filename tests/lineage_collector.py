"""A real OpenLineage HTTP collector for tests, and validation against the official schemas."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SPEC_DIR = Path("/work/shared/openlineage-spec")
ICEFLOE_FACET = Path(__file__).resolve().parent.parent / "catalog" / "lineage" / "IcefloeCommitRunFacet.json"


class Collector:
    """``POST /api/v1/lineage`` into a list; can go down and come back on the same port."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.events: list[dict[str, Any]] = []
        self.raw_bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.reject_status: int | None = None  # answer every POST with this status when set
        self.hang = threading.Event()  # while set, POSTs get no answer (a collector that hangs)
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def up(self) -> Collector:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if collector.hang.is_set():
                    collector._release.wait(60)
                    return
                if collector.reject_status is not None:
                    self.send_response(collector.reject_status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with collector._lock:
                    collector.raw_bodies.append(body)
                    collector.events.append(json.loads(body))
                    collector.headers.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def down(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.snapshot()
            if predicate(events):
                return events
            time.sleep(0.05)
        raise AssertionError(f"collector did not get the expected events in {timeout}s; got {len(self.snapshot())}")

    def wait_count(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        return self.wait_for(lambda events: len(events) >= count, timeout)


def _registry() -> Registry:
    resources = []
    for path in [
        SPEC_DIR / "OpenLineage.json",
        *sorted((SPEC_DIR / "facets").glob("*.json")),
        *sorted((SPEC_DIR / "iceberg").glob("*.json")),
        ICEFLOE_FACET,
    ]:
        contents = json.loads(path.read_text())
        resources.append((contents["$id"], Resource.from_contents(contents)))
    return Registry().with_resources(resources)


REGISTRY = _registry()
EVENT_SCHEMA = json.loads((SPEC_DIR / "OpenLineage.json").read_text())


def _validate(instance: Any, ref: str) -> None:
    Draft202012Validator({"$ref": ref}, registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER).validate(
        instance
    )


def validate_event(event: dict[str, Any]) -> None:
    """The event against OpenLineage.json and every facet against the schema its _schemaURL names."""
    _validate(event, EVENT_SCHEMA["$id"] + "#/$defs/RunEvent")
    facets: list[dict[str, Any]] = []
    facets += (event["run"].get("facets") or {}).values()
    facets += (event["job"].get("facets") or {}).values()
    for dataset in [*(event.get("inputs") or []), *(event.get("outputs") or [])]:
        facets += (dataset.get("facets") or {}).values()
        facets += (dataset.get("inputFacets") or {}).values()
        facets += (dataset.get("outputFacets") or {}).values()
    for facet in facets:
        url = facet["_schemaURL"]
        base = url.split("#", 1)[0]
        assert REGISTRY.get(base) is not None, f"facet schema {url} is not in the official spec set"
        _validate(facet, url)
