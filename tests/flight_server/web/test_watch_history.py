"""The watch page as an operator uses it (issue 39, item 8), in headless Chromium.

Commits are made through Flight first (DoPut, a SQL DELETE of 120 rows, a compaction by the
``icefloe.maintain`` action, a refused DoPut); then the page is opened. It must show the history
from the commit log at once (before, the list was empty until the next commit), the DELETE as
120 rows deleted (before: ``rows 480``, the rows rewritten), the compaction as maintenance that
changes no row (before: ``replace 638``), filter by operation and by table, page back while
keeping its list bounded, open a table's page, and show the health strip's values.
Screenshots of each step go to the test artefacts (``browser_support.ARTIFACTS``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from tests.doput_client import do_put
from tests.flight_server.web.browser_support import WebDriverWait, chromium, screenshot  # skips without chromium
from tests.flight_server.web.ops_support import ops_url
from tests.flight_server.web.test_ops_metrics import city_rows
from tests.servers import ServerProcess, serving

PAGE = 5
MAX_ROWS = 8


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def worked_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, dict[str, int]]]:
    """A demo server after: 4 DoPuts to demo.cities, a DELETE of 120 floe sightings, a compaction
    of demo.cities, a refused DoPut. Returns the server and the seqs of those commits."""
    with serving(tmp_path / "wh", ["--metrics-port", "0", "--demo"]) as server:
        seqs: dict[str, int] = {}
        for i in range(4):
            answer = do_put(server.location, ("demo", "cities"), city_rows(2, first_id=100 + 10 * i))
            seqs[f"put{i}"] = answer["commit_seq"]
        with flightsql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM demo.floe_sightings WHERE city_id IN (3, 5)")
            assert cur.rowcount in (-1, 120)
            cur.execute("SELECT count(*) FROM demo.floe_sightings")
            assert cur.fetchall() == [(360,)]
        client = flight.FlightClient(server.location)
        try:
            body = json.dumps({"table": "demo.cities", "orphan_grace_s": 3600}).encode()
            list(client.do_action(flight.Action("icefloe.maintain", body)))
        finally:
            client.close()
        with pytest.raises(pa.ArrowKeyError, match="does not exist"):  # refused: NOT_FOUND
            do_put(server.location, ("demo", "no_such_table"), city_rows(1))
        yield server, seqs


def _rows(driver: Any) -> list[dict[str, str]]:
    """The commit list as shown: one dict per row (seq, table, operation, cells by class)."""
    rows: list[dict[str, str]] = driver.execute_script(
        "return [...document.querySelectorAll('#commits tbody tr')].map(tr => ({"
        " seq: tr.dataset.seq, table: tr.dataset.table, operation: tr.dataset.operation,"
        " maintenance: tr.classList.contains('maintenance') ? 'yes' : 'no',"
        " added: tr.querySelector('td.added').textContent, deleted: tr.querySelector('td.deleted').textContent,"
        " net: tr.querySelector('td.net').textContent, op_text: tr.querySelector('td.operation').textContent}))")
    return rows


def _seqs(driver: Any) -> list[int]:
    return [int(r["seq"]) for r in _rows(driver)]


def _select(driver: Any, select_id: str, value: str) -> None:
    driver.execute_script(
        "const s = document.getElementById(arguments[0]); s.value = arguments[1];"
        " s.dispatchEvent(new Event('change'));", select_id, value)


def _text(driver: Any, element_id: str) -> str:
    text: str = driver.execute_script("return document.getElementById(arguments[0]).textContent", element_id)
    return text


def _head(server: ServerProcess) -> int:
    client = flight.FlightClient(server.location)
    try:
        status = next(client.do_action(flight.Action("icefloe.status", b"")))
        head: int = json.loads(status.body.to_pybytes())["commit_head"]
        return head
    finally:
        client.close()


def test_the_page_shows_history_filters_pages_tables_and_health(
        worked_server: tuple[ServerProcess, dict[str, int]], browser: Any, request: pytest.FixtureRequest) -> None:
    server, seqs = worked_server
    head = _head(server)
    browser.get(f"{ops_url(server)}/?page_size={PAGE}&max_rows={MAX_ROWS}")
    wait = WebDriverWait(browser, 30, poll_frequency=0.05)

    # History on open, from the log: the newest page, newest first, with no commit since.
    wait.until(lambda d: len(_rows(d)) == PAGE)
    assert _seqs(browser) == list(range(head, head - PAGE, -1))
    rows = {int(r["seq"]): r for r in _rows(browser)}
    delete = next(r for r in rows.values() if r["operation"] == "delete")
    assert delete["table"] == "demo.floe_sightings"
    # True counts: 120 rows went; the net says so whatever was rewritten to do it.
    assert delete["net"] == "−120", delete
    assert delete["maintenance"] == "no"
    compaction = next(r for r in rows.values() if r["operation"] == "replace")
    assert compaction["table"] == "demo.cities"
    assert compaction["maintenance"] == "yes" and "maintenance" in compaction["op_text"], compaction
    assert compaction["added"] == "" and compaction["deleted"] == "" and compaction["net"] == "0", compaction
    screenshot(browser, request, "1-history-on-open")

    # Filter by operation: only the DELETE, then only maintenance.
    _select(browser, "filter-operation", "delete")
    wait.until(lambda d: [r["operation"] for r in _rows(d)] == ["delete"])
    _select(browser, "filter-operation", "maintenance")
    wait.until(lambda d: _rows(d) and all(r["maintenance"] == "yes" for r in _rows(d)))
    assert "replace" in {r["operation"] for r in _rows(browser)}
    screenshot(browser, request, "2-filter-maintenance")
    _select(browser, "filter-operation", "")
    wait.until(lambda d: _seqs(d) == list(range(head, head - PAGE, -1)))

    # Page back: the list goes on below, contiguous, and stays bounded (the newest make room).
    browser.execute_script("document.getElementById('older').click()")
    wait.until(lambda d: min(_seqs(d)) == head - 2 * PAGE + 1)
    shown = _seqs(browser)
    assert len(shown) == MAX_ROWS
    assert shown == list(range(max(shown), max(shown) - MAX_ROWS, -1))
    assert browser.execute_script("return !document.getElementById('latest').hidden")
    screenshot(browser, request, "3-paged-back")
    while browser.execute_script("return !document.getElementById('older').disabled"):
        low = min(_seqs(browser))
        browser.execute_script("document.getElementById('older').click()")
        wait.until(lambda d, low=low: min(_seqs(d)) < low)
        assert len(_seqs(browser)) <= MAX_ROWS
    assert min(_seqs(browser)) == 1  # the start of the log: the demo's first commit
    browser.execute_script("document.getElementById('latest').click()")
    wait.until(lambda d: _seqs(d) == list(range(head, head - PAGE, -1)))

    # Filter by table: demo.cities opens its page; the list holds only its commits.
    _select(browser, "filter-table", "demo.cities")
    wait.until(lambda d: _rows(d) and {r["table"] for r in _rows(d)} == {"demo.cities"})
    assert seqs["put3"] in _seqs(browser)
    wait.until(lambda d: _text(d, "table-name") == "demo.cities")
    facts: dict[str, str] = browser.execute_script(
        "const out = {}; for (const dd of document.querySelectorAll('#table-facts dd'))"
        " out[dd.dataset.fact] = dd.textContent; return out;")
    assert facts["rows"] == "16"  # 8 demo rows + 4 DoPuts of 2
    assert facts["data files"] == "1"  # compacted
    assert int(facts["snapshots"]) >= 2
    assert facts["bytes"].endswith("B") and facts["bytes"] != "—"
    assert facts["last maintenance"].startswith("#") and "replace" in facts["last maintenance"], facts
    columns = browser.execute_script(
        "return [...document.querySelectorAll('#table-schema td.name')].map(td => td.textContent)")
    assert columns == ["city_id", "name", "country", "population", "latitude"]
    assert browser.execute_script("return document.querySelectorAll('#table-snapshots tbody tr').length") >= 2
    assert browser.execute_script("return document.getElementById('overview').hidden")
    screenshot(browser, request, "4-table-page")

    # The health strip: ready, the log's range, the refused DoPut, statement latency, charts.
    wait.until(lambda d: _text(d, "stat-ready") == "ready")
    wait.until(lambda d: _text(d, "stat-log") == f"seq 1–{head}")
    assert int(_text(browser, "stat-refused")) >= 1
    wait.until(lambda d: _text(d, "stat-query-latency").endswith(" ms"))
    assert _text(browser, "stat-queries") == "0 running, 0 queued"
    wait.until(lambda d: _text(d, "stat-watchers") == "1")  # this page's event stream (polled every 2 s)
    wait.until(lambda d: int(d.execute_script(
        "return document.getElementById('chart-commits').dataset.points || '0'")) >= 1)
    # A live commit reaches the table's page list (it matches the filter) and the head.
    answer = do_put(server.location, ("demo", "cities"), city_rows(1, first_id=900))
    wait.until(lambda d: _seqs(d)[0] == answer["commit_seq"])
    wait.until(lambda d: _text(d, "head") == f"head {answer['commit_seq']}")
    screenshot(browser, request, "5-health-and-live")
