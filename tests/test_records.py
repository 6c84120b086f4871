"""Records: atomic appends, torn lines reported by number, other format versions refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.records import RECORD_VERSION, RecordError, amend_newest, append_record, read_records


def test_append_then_read_round_trips(results: Path) -> None:
    append_record(results, {"record_version": RECORD_VERSION, "n": 1})
    append_record(results, {"record_version": RECORD_VERSION, "n": 2})
    records, bad = read_records(results)
    assert [r["n"] for r in records] == [1, 2] and bad == []


def test_a_torn_line_is_reported_by_number_and_the_rest_still_read(results: Path) -> None:
    append_record(results, {"record_version": RECORD_VERSION, "n": 1})
    with results.open("a") as f:
        f.write('{"record_version": 1, "n": 2, "step_ti')  # a writer killed mid-line
    append_record(results, {"record_version": RECORD_VERSION, "n": 3})
    records, bad = read_records(results)
    assert [r["n"] for r in records] == [1, 3]
    assert [b.line_number for b in bad] == [2]
    assert "not valid JSON" in bad[0].reason


def test_a_line_that_is_not_a_record_is_reported(results: Path) -> None:
    results.write_text('{"record_version": 1}\n[1, 2]\n')
    records, bad = read_records(results)
    assert len(records) == 1 and [b.line_number for b in bad] == [2]


def test_another_record_version_is_refused_with_a_clear_message(results: Path) -> None:
    results.write_text(json.dumps({"record_version": RECORD_VERSION + 1}) + "\n")
    with pytest.raises(RecordError, match=f"version-{RECORD_VERSION + 1} record; this suite reads version"):
        read_records(results)


def test_a_missing_file_is_a_record_error(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="cannot read results file"):
        read_records(tmp_path / "absent.jsonl")


def test_the_newest_record_is_amended_in_place_and_every_earlier_line_kept_byte_for_byte(results: Path) -> None:
    for n in (1, 2):
        append_record(results, {"record_version": RECORD_VERSION, "n": n})
    earlier = results.read_bytes().splitlines(keepends=True)[0]
    assert amend_newest(results, lambda r: r["n"] == 2, lambda r: {**r, "amended": True})
    assert results.read_bytes().startswith(earlier)
    records, _ = read_records(results)
    assert [(r["n"], r.get("amended")) for r in records] == [(1, None), (2, True)]
    # another's newest line, a torn one or no file: nothing written
    assert not amend_newest(results, lambda r: r["n"] == 1, lambda r: {**r, "n": 9})
    with results.open("a") as f:
        f.write('{"record_version": 1, "n": ')
    torn = results.read_bytes()
    assert not amend_newest(results, lambda r: True, lambda r: r) and results.read_bytes() == torn
    assert not amend_newest(results.with_name("none.jsonl"), lambda r: True, lambda r: r)
    assert not list(results.parent.glob("*.amending"))
