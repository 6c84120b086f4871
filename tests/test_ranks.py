"""bench/harness/ranks.py: a spawned process made torchrun's rank, and the context ranks are forked from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.harness import ranks
from strategies.distributed import RENDEZVOUS_FILE_VARIABLE

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", RENDEZVOUS_FILE_VARIABLE)


def test_becoming_a_rank_sets_torchruns_variables_and_ties_the_process_to_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    # This process is the test run's own: what ties a rank to its parent is recorded, not done.
    monkeypatch.setattr(ranks, "die_with_parent", lambda: calls.append("die_with_parent"))
    monkeypatch.setattr(ranks, "open_window", lambda: calls.append("open_window"))
    for name in TORCHRUN_VARIABLES:  # set first, so that monkeypatch removes them again after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    ranks.become_rank(1, 4, str(tmp_path))
    assert calls == ["die_with_parent", "open_window"]
    assert {name: os.environ[name] for name in TORCHRUN_VARIABLES} == {
        "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
        RENDEZVOUS_FILE_VARIABLE: str(tmp_path / "rendezvous"),
    }


def test_ranks_fork_from_a_server_that_preloads_torch_and_the_suite() -> None:
    from multiprocessing import forkserver

    context = ranks.rank_context()
    assert context.get_start_method() == "forkserver"
    assert forkserver._forkserver._preload_modules == ranks.PRELOADED  # what the server imports once, then forks
    assert {"torch", "bench.harness.runner"} <= set(ranks.PRELOADED)
    assert ranks.rank_context() is context  # one server, shared by every group this process starts


@pytest.mark.launches
def test_a_call_in_a_forked_process_returns_its_value_or_raises_its_error_here() -> None:
    from bench.harness.ranks import in_forked_process

    assert in_forked_process(os.getpid) != os.getpid()
    assert in_forked_process(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        in_forked_process(divmod, 1, 0)
    # where a run's process would time it: forked on a CPU, here on a GPU (CUDA's start would come first)
    assert ranks.like_a_run("cpu", os.getpid) != os.getpid() and ranks.like_a_run("cuda", os.getpid) == os.getpid()


def test_torch_threads_gives_the_calling_process_its_threads_back_even_after_an_error() -> None:
    import torch

    from bench.harness.ranks import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("a timing that failed")
    assert torch.get_num_threads() == before
