"""The watch page in headless Chromium (Debian's, installed by scripts/fetch-browser): it lists
the tables, a DoPut shows up as a new commit row within a second, and a table's lineage is drawn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flightsql
import pytest

from tests.doput_client import do_put
from tests.flight_server.web.browser_support import By, WebDriverWait, chromium, screenshot  # skips without chromium
from tests.flight_server.web.ops_support import ops_url
from tests.flight_server.web.test_ops_metrics import city_rows
from tests.servers import ServerProcess, serving


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "wh", ["--metrics-port", "0", "--demo"]) as server:
        yield server


def _table_rows(driver: Any) -> dict[str, str]:
    """table name -> the rows cell, read in one go (the page replaces the rows as it reloads)."""
    rows: dict[str, str] = driver.execute_script(
        "const out = {}; for (const tr of document.querySelectorAll('#tables tbody tr'))"
        " out[tr.dataset.table] = tr.querySelector('td.rows').textContent; return out;")
    return rows


def _click_table(driver: Any, name: str) -> None:
    driver.execute_script(f"document.querySelector('#tables tr[data-table=\"{name}\"] td.name').click()")


def _lineage_nodes(driver: Any) -> set[str]:
    nodes: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#lineage g[data-node]')].map(g => g.dataset.node)")
    return set(nodes)


def test_the_page_shows_tables_and_a_doput_within_a_second(page_server: ServerProcess, browser: Any,
                                                           request: pytest.FixtureRequest) -> None:
    base = ops_url(page_server)
    browser.get(f"{base}/")
    wait = WebDriverWait(browser, 30, poll_frequency=0.05)
    wait.until(lambda d: d.find_element(By.ID, "feed-state").text == "live")
    wait.until(lambda d: _table_rows(d).get("demo.cities") == "8")
    assert _table_rows(browser)["demo.floe_sightings"] == "480"
    # The page notes when each commit row arrived; the DoPut's acknowledgement is timed here.
    browser.execute_script(
        "window.arrivals = {}; new MutationObserver(() => {"
        " for (const tr of document.querySelectorAll('#commits tbody tr'))"
        "   if (!(tr.dataset.seq in window.arrivals)) window.arrivals[tr.dataset.seq] = Date.now();"
        "}).observe(document.querySelector('#commits tbody'), {childList: true});"
    )
    answer = do_put(page_server.location, ("demo", "cities"), city_rows(3))
    acked_ms = time.time() * 1000
    seq = str(answer["commit_seq"])
    wait.until(lambda d: seq in d.execute_script("return window.arrivals"))
    arrived_ms = browser.execute_script("return window.arrivals")[seq]
    assert arrived_ms - acked_ms < 1000, f"the commit row appeared {arrived_ms - acked_ms:.0f} ms after the ack"
    row = browser.find_element(By.CSS_SELECTOR, f'#commits tbody tr[data-seq="{seq}"]')
    assert "demo.cities" in row.text and "append" in row.text
    # The tables reload after a commit: the new row count shows, and the snapshot id exactly
    # (a 63-bit number: sent as text, JavaScript numbers would round it).
    wait.until(lambda d: _table_rows(d).get("demo.cities") == "11")
    shown = browser.execute_script(
        "return document.querySelector('#tables tr[data-table=\"demo.cities\"]').children[2].textContent")
    assert shown == str(answer["snapshot_id"])
    screenshot(browser, request, "after-doput")


def test_the_page_draws_a_tables_lineage(page_server: ServerProcess, browser: Any,
                                         request: pytest.FixtureRequest) -> None:
    with flightsql.connect(page_server.location) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE big_cities AS SELECT c.name, s.floes FROM demo.cities c "
                    "JOIN demo.floe_sightings s ON c.city_id = s.city_id WHERE c.population > 100000")
        cur.fetchall()
    browser.get(f"{ops_url(page_server)}/")
    wait = WebDriverWait(browser, 30, poll_frequency=0.05)
    wait.until(lambda d: "default.big_cities" in _table_rows(d))
    _click_table(browser, "default.big_cities")
    wait.until(lambda d: len(_lineage_nodes(d)) == 3)
    assert _lineage_nodes(browser) == {"default.big_cities", "demo.cities", "demo.floe_sightings"}
    assert len(browser.find_elements(By.CSS_SELECTOR, "#lineage line")) == 2
    screenshot(browser, request, "lineage")
    # demo.cities' own graph has big_cities downstream.
    _click_table(browser, "demo.cities")
    wait.until(lambda d: _lineage_nodes(d) == {"demo.cities", "default.big_cities"})
