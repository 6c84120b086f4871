"""bench/predict/reference_names.py: how a calibration names its reference runs, mp's at a rank's threads too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.harness.config import RunConfig, resolve
from bench.predict.reference_names import rank_threads, strategy_of, threads_of, variant_name, with_thread_variants


def test_an_in_process_reference_run_is_timed_again_at_a_ranks_share_of_a_cpus_cores(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)

    def config(strategy: str) -> RunConfig:
        return resolve(RunConfig.from_flags(strategy=strategy, devices=2, microbatches=4, model="mlp", preset="tiny",
                                            out=str(tmp_path / "r.jsonl"), accelerator="cpu"))

    mp, pp = config("mp"), config("pp")
    named = with_thread_variants({"mp@8": mp, "pp@8": pp, "pp/interleaved@8": pp}, 2)
    # pp's ranks have their share already; mp's one process every core, and again a rank's 4 of 8
    assert named == {"mp@8": mp, "pp@8": pp, "pp/interleaved@8": pp, "mp/4-thread@8": mp}
    assert [threads_of(n) for n in ("mp/4-thread@8", "mp/4-thread", "mp@8", "pp/interleaved:bubble")] == [
        4, 4, None, None]
    assert strategy_of("mp/4-thread") == "mp" and variant_name("mp", "4-thread") == "mp/4-thread"
    assert rank_threads("cpu", 4) == 2 and rank_threads("cuda", 2) is None  # a GPU's compute is not its host's
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # a rank's share is every core: nothing more to time
    assert rank_threads("cpu", 2) is None and with_thread_variants({"mp@8": mp}, 2) == {"mp@8": mp}
