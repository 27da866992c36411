"""Helpers for the operator-endpoint tests: the metrics URL of a server, parsed metrics."""

from __future__ import annotations

import re
from collections import defaultdict

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import ServerProcess

METRICS_LINE = re.compile(r"icefloe metrics on (http://\S+)/metrics")


def ops_url(server: ServerProcess) -> str:
    found = METRICS_LINE.search(server.log)
    assert found, server.log
    return found.group(1)


def scrape(base: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of ``/metrics``: sample name -> {sorted labels: value}."""
    response = httpx.get(f"{base}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(metrics: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when absent)."""
    return metrics.get(name, {}).get(tuple(sorted(labels.items())), 0.0)
