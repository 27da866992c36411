"""The watch page's ingest section in headless Chromium: each connector's state, rows,
checkpoint and last error, as ``/api/ingest`` reports them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog import RocksCatalog
from tests.flight_server.web.browser_support import WebDriverWait, chromium, screenshot  # skips without chromium
from tests.flight_server.web.ops_support import ops_url
from tests.servers import serving

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64())])


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from chromium()


def _connectors(driver: Any) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = driver.execute_script(
        "const out = {}; for (const tr of document.querySelectorAll('#ingest tbody tr'))"
        " out[tr.dataset.connector] = [...tr.children].map(td => td.textContent); return out;")
    return rows


def test_the_page_shows_connectors_their_checkpoint_and_last_error(tmp_path: Path, browser: Any,
                                                                   request: pytest.FixtureRequest) -> None:
    warehouse, src = tmp_path / "wh", tmp_path / "src"
    src.mkdir()
    cat = RocksCatalog("setup", warehouse=str(warehouse), **{"read-only": "false"})
    try:
        cat.create_namespace("ns")
        cat.create_table("ns.good", SCHEMA)
        cat.create_table("ns.strict", SCHEMA, properties={"icefloe.expect.positive": "amount > 0"})
    finally:
        cat.close()
    pq.write_table(pa.table({"id": [1, 2], "amount": [1.0, -2.0]}, SCHEMA), src / "a.parquet")
    config = tmp_path / "connectors.toml"
    config.write_text("".join(
        f'[connectors.{name}]\ntable = "ns.{name}"\nsource = "files"\npoll_s = 0.2\n\n'
        f'[connectors.{name}.options]\npath = "{src}"\n\n' for name in ("good", "strict")))
    with serving(warehouse, ["--metrics-port", "0", "--ingest-config", str(config)]) as server:
        browser.get(f"{ops_url(server)}/")
        wait = WebDriverWait(browser, 30, poll_frequency=0.1)
        wait.until(lambda d: _connectors(d).get("good", [""] * 4)[3] == "up"
                   and _connectors(d).get("strict", [""] * 4)[3] == "failed")
        good, strict = _connectors(browser)["good"], _connectors(browser)["strict"]
        assert good[:2] == ["good", "ns.good"] and good[4] == "2" and good[7].startswith("step 1: a.parquet @ ")
        assert good[8] == ""  # no error
        assert strict[4] == "0" and strict[7] == "step 0: nothing taken yet"
        assert "'positive' (amount > 0) failed on 1 of 2 rows" in strict[8]
        assert browser.execute_script("return document.getElementById('ingest-none').hidden") is True
        screenshot(browser, request, "ingest")
