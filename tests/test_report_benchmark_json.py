"""Run records carried in a pytest-benchmark JSON file (reports/benchmark_json.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.records import RecordError
from reports.benchmark_json import benchmark_records
from tests.helpers.records import record


def test_the_records_are_those_in_each_benchmarks_extra_info_in_order(tmp_path: Path) -> None:
    single, ddp = record("single", 1, 100.0), record("ddp", 2, 180.0)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"machine_info": {}, "benchmarks": [
        {"name": "single", "extra_info": {"record": single}}, {"name": "no extra_info"},
        {"name": "null extra_info", "extra_info": None}, {"name": "other", "extra_info": {"rounds": 3}},
        {"name": "ddp", "extra_info": {"record": ddp}}]}))
    assert benchmark_records(path) == [single, ddp]
    path.write_text(json.dumps({"machine_info": {}}))
    assert benchmark_records(path) == []  # no benchmarks: no records


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("[]", "TypeError: a JSON list, not pytest-benchmark's object"),
        ('{"benchmarks": [1, 2]}', "AttributeError: 'int' object has no attribute 'get'"),
        ('{"benchmarks": [', "JSONDecodeError: "),
        (None, "FileNotFoundError: "),
    ],
)
def test_a_file_that_is_not_pytest_benchmarks_json_is_one_record_error_naming_it(
    content: str | None, why: str, tmp_path: Path
) -> None:
    path = tmp_path / "bench.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RecordError) as error:
        benchmark_records(path)
    assert str(error.value).startswith(f"cannot read benchmark JSON {path}: {why}")
    assert error.value.__suppress_context__  # raised from None: one line, no chained traceback
