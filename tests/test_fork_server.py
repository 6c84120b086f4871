"""bench/harness/fork_server.py: the server bench run's workers are forked from dies with the launcher, however
late it asks. (A SIGKILLed launcher leaving nothing behind: tests/test_processes.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.harness.processes import AGENT_VARIABLE, SERVER_VARIABLE
from tests.helpers.cli import ROOT

IMPORT_IT = "import bench.harness.fork_server, os; print(os.environ['BENCH_FORK_SERVER_PID'] == str(os.getpid()))"


@pytest.mark.launches
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize(("agent", "alive"), [("parent", True), ("gone", False)])
def test_a_server_whose_launcher_is_gone_leaves_at_once_and_one_whose_launcher_lives_names_itself(
    agent: str, alive: bool,
) -> None:
    """Gone: the agent named is not our parent (it died and we were handed on), as a killed launcher's server finds."""
    pid = os.getpid() if agent == "parent" else 1
    env = {**os.environ, AGENT_VARIABLE: str(pid)}
    env.pop(SERVER_VARIABLE, None)
    proc = subprocess.run([sys.executable, "-c", IMPORT_IT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == ((0, "True") if alive else (1, ""))
