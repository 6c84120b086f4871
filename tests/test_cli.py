"""bench/cli.py: the commands' own output, in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from strategies import STRATEGIES
from strategies.schedules import available_schedules


def test_list_names_every_strategy_and_the_schedules_this_torch_offers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in STRATEGIES)
    (schedules,) = [line for line in out.splitlines() if line.startswith("schedules:")]
    assert schedules.split(":", 1)[1].split("(")[0].strip() == ", ".join(available_schedules())


def test_bench_run_validates_on_one_thread_before_its_workers_fork_from_it(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    # libgomp's threads do not survive a fork: had validation made a team of 2, a worker forked after it (on CPUs,
    # bench/harness/launch.py) would wait on them for ever at its first parallel region of 2 threads
    import torch

    from bench import cli
    from bench.harness.ranks import torch_threads

    threads: list[tuple[str, int]] = []
    validate = cli.run_config
    monkeypatch.setattr(cli, "run_config", lambda args: threads.append(("validated", torch.get_num_threads()))
                        or validate(args))
    monkeypatch.setattr(cli, "launch_local", lambda *args: threads.append(("launched", torch.get_num_threads())) or 0)
    with torch_threads(2):
        assert main(["run", "--strategy", "ddp", "--devices", "2", "--model", "mlp", "--preset", "tiny",
                     "--out", str(tmp_path / "r.jsonl")]) == 0
    assert threads == [("validated", 1), ("launched", 2)]
