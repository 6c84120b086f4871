"""bench/harness/paths.py: where a command will write, checked by making and removing a file there."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.paths import check_writable, writable_folder
from strategies import ConfigError


def test_a_missing_folder_is_judged_by_the_nearest_one_that_exists_and_nothing_is_left_behind(tmp_path: Path) -> None:
    assert writable_folder(tmp_path / "a" / "b") == tmp_path
    check_writable(tmp_path / "a" / "b" / "r.jsonl")
    assert list(tmp_path.iterdir()) == []  # no folder made, no probe left


@pytest.mark.parametrize("folder", ["/proc", "/sys"])
def test_a_pseudo_file_system_refuses_even_root(folder: str) -> None:
    with pytest.raises(ConfigError, match=f"--out {folder}/r.jsonl: cannot write in {folder}$"):
        check_writable(Path(folder) / "r.jsonl")


def test_a_folder_or_a_file_under_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("kept")
    with pytest.raises(ConfigError, match=f"cannot write in {blocker}$"):
        check_writable(blocker / "r.jsonl")
    with pytest.raises(ConfigError, match=f"--profile {tmp_path}: is a folder, not a file$"):
        check_writable(tmp_path, "--profile")
    assert blocker.read_text() == "kept"
