"""bench/cli.py: the commands' own output, in this process."""

from __future__ import annotations

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
