"""Configuration by the OpenLineage client's conventions; redaction and hashed names."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pyarrow as pa
import pytest
from lineage_collector import Collector, validate_event
from lineage_support import SETTINGS, Opener

from catalog import CommitRecord, keys
from catalog.lineage import LineageSettings, build_commit_events, build_failure_events, resolve_client
from catalog.lineage.redact import redact_text, redact_uri

SCHEMA = pa.schema([("id", pa.int64())])


def _wait(predicate: object, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_no_configuration_means_export_off_and_no_hold(clean_env: None, opener: Opener) -> None:
    assert resolve_client().state == "unconfigured"
    cat, exporter = opener.open()
    assert not exporter.enabled and exporter.cursor() is None
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    assert exporter.pending() == 0
    assert cat.log.holds() == {}


def test_openlineage_disabled_releases_the_hold(
    ol_env: Collector, opener: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat, exporter = opener.open()
    assert exporter.cursor() is not None
    opener.close(cat, exporter)
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    cat, exporter = opener.open()
    assert exporter.state == "disabled" and exporter.cursor() is None
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    time.sleep(0.3)
    assert ol_env.snapshot() == []


@pytest.mark.parametrize(
    "content",
    ["transport: [unclosed", "- just\n- a list\n", "transport:\n  url: http://127.0.0.1:9\n"],
    ids=["yaml-syntax", "not-a-mapping", "no-type"],
)
def test_unparseable_config_disables_export_loudly_and_keeps_events(
    clean_env: None,
    collector: Collector,
    opener: Opener,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    content: str,
) -> None:
    bad = tmp_path / "openlineage.yml"
    bad.write_text(content)
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(bad))
    # Also a URL: the client would silently fall back to it; we must not.
    monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
    with caplog.at_level(logging.ERROR, logger="icefloe.lineage"):
        cat, exporter = opener.open()
    assert exporter.state == "invalid"
    assert any("lineage export DISABLED" in r.getMessage() for r in caplog.records)
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
    assert len(cat.load_table("ns.t").scan().to_arrow()) == 1  # writes are unaffected
    time.sleep(0.3)
    assert collector.snapshot() == []
    assert cat.log.holds() == {"lineage": 0}  # the commits wait for a usable configuration
    opener.close(cat, exporter)
    # Fix the configuration (restart): the held commits go out.
    bad.write_text(f"transport:\n  type: http\n  url: {collector.url}\n")
    cat, exporter = opener.open()
    assert exporter.enabled
    events = collector.wait_count(4)
    assert [e["job"]["name"] for e in events] == ["icefloe.create.ns.t"] * 2 + ["icefloe.append.ns.t"] * 2


def test_missing_config_file_is_invalid(clean_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(tmp_path / "nope.yml"))
    resolved = resolve_client()
    assert resolved.state == "invalid" and "OPENLINEAGE_CONFIG" in resolved.reason


def test_bad_url_is_invalid(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENLINEAGE_URL", "not a url")
    assert resolve_client().state == "invalid"


def test_file_transport_from_openlineage_yml_in_cwd(clean_env: None, opener: Opener, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    Path("openlineage.yml").write_text(f"transport:\n  type: file\n  log_file_path: {out}\n  append: true\n")
    cat, exporter = opener.open()
    assert exporter.enabled and exporter.resolved.transport_kind == "file"
    cat.create_namespace("ns")
    cat.create_table("ns.t", SCHEMA)
    assert _wait(lambda: out.exists() and len(out.read_text().splitlines()) == 2)
    for line in out.read_text().splitlines():
        validate_event(json.loads(line))


def _record(**changes: object) -> CommitRecord:
    base: dict[str, object] = {
        "seq": 7,
        "committed_at_us": 1_780_000_000_123_456,
        "namespace": ("ns",),
        "table": "t",
        "table_uuid": "0f8a5e0c-7d4c-4b5e-9a55-6f6c9d1e2a3b",
        "operation": "append",
        "snapshot_id": 42,
        "added_rows": 3,
        "added_files": 1,
        "metadata_location": None,
    }
    base.update(changes)
    return CommitRecord(**base)  # type: ignore[arg-type]


SECRET_SQL = (
    "INSERT INTO ns.t SELECT * FROM ns.src WHERE url = 's3://AKIAXXXX:hunter2@bucket/x.parquet?X-Amz-Signature=abc123'"
    " AND password = 'hunter2' -- token=sekrit"
)


def test_redaction_of_uris_sql_and_errors() -> None:
    assert redact_uri("s3://key:secret@bucket/wh?sig=1#frag") == "s3://bucket/wh"
    assert redact_uri("grpc+tls://user:pw@host:31337") == "grpc+tls://host:31337"
    settings = LineageSettings(
        namespace="ns1", catalog_uri="grpc://admin:pw123@host:1?token=abc", warehouse="s3://AK:SK@bucket/wh?x=1"
    )
    events = build_commit_events(_record(extra={"sql": SECRET_SQL}), None, settings)
    events += build_failure_events(
        settings,
        run_id="01890a5d-ac96-774b-bcce-b302099a8057",
        namespace=("ns",),
        table="t",
        operation="append",
        error="OSError: cannot open https://bob:pw456@store.example/x?api_key=zzz9 (Authorization: Bearer eyJabc.def)",
        started_at_us=1,
        failed_at_us=2,
    )
    body = json.dumps(events)
    for secret in (
        "hunter2",
        "AKIAXXXX",
        "abc123",
        "sekrit",
        "pw123",
        "token=abc",
        "AK:SK",
        "pw456",
        "zzz9",
        "eyJabc",
        "x=1",
    ):
        assert secret not in body, secret
    for event in events:
        validate_event(event)
    assert events[0]["outputs"][0]["facets"]["catalog"]["warehouseUri"] == "s3://bucket/wh"
    assert "ns.src" in body  # redaction keeps what is not secret
    assert redact_text("password: 'x y'") == "password: ***"
    assert redact_text('SET s3_secret_access_key="k/1+2" , region=eu') == "SET s3_secret_access_key=*** , region=eu"
    assert redact_text("WHERE name = 'ok'") == "WHERE name = 'ok'"


def test_hashed_names(ol_env: Collector, opener: Opener) -> None:
    settings = LineageSettings(namespace="icefloe-test", hash_names=True)
    cat, _ = opener.open(settings)
    cat.create_namespace("secret_ns")
    from catalog import commit_context

    with commit_context(extra={"sql": "INSERT INTO secret_ns.payroll SELECT * FROM secret_ns.salaries"}):
        cat.create_table("secret_ns.payroll", SCHEMA)
    cat.rename_table("secret_ns.payroll", "secret_ns.payroll2")
    events = ol_env.wait_count(4)
    raw = b"".join(ol_env.raw_bodies)
    assert b"payroll" not in raw and b"salaries" not in raw and b"secret_ns" not in raw
    names = {e["outputs"][0]["name"] for e in events}
    assert all(n.startswith("sha256:") for n in names) and len(names) == 2
    for event in events:
        validate_event(event)
    assert SETTINGS.dataset_name("a.b") == "a.b"
    assert sum(1 for _ in cat.store.scan(keys.LINEAGE_OUTBOX)) == 0
