"""Staging tokens' bodies and job ids are client bytes: anything but the exact shape is refused."""

from __future__ import annotations

import pytest

from catalog.staging import StagedAppend, check_job

GOOD = {
    "id": "a" * 32, "table": "ns.t", "table_uuid": "u", "job": "j", "rows": 1, "files": 1, "bytes": 10,
    "schema_id": 0, "spec_id": 0, "principal": None, "staged_at": 1.5,
}


def test_a_staged_append_round_trips() -> None:
    staged = StagedAppend.from_json(GOOD)
    assert StagedAppend.from_json(staged.to_json()) == staged


@pytest.mark.parametrize("body", [
    None, [], "x", {}, {**GOOD, "extra": 1}, {k: v for k, v in GOOD.items() if k != "rows"},
    {**GOOD, "rows": "1"}, {**GOOD, "rows": True}, {**GOOD, "staged_at": "now"}, {**GOOD, "id": 5},
    {**GOOD, "principal": 3}, {**GOOD, "spec_id": 1.5},
])
def test_malformed_bodies_are_refused(body: object) -> None:
    with pytest.raises(ValueError):
        StagedAppend.from_json(body)


@pytest.mark.parametrize("job", ["", "x" * 257, "a\x00b", "tab\there", "del\x7f"])
def test_bad_job_ids_are_refused(job: str) -> None:
    with pytest.raises(ValueError, match="job id"):
        check_job(job)


def test_good_job_ids_pass() -> None:
    assert check_job("spark-write-6f1c") == "spark-write-6f1c"
    assert check_job("x" * 256) == "x" * 256
