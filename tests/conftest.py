"""Fixtures shared by the tests (helpers to import live in tests/helpers/)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results.jsonl"
