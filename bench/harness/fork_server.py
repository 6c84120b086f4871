"""Imported first by the fork server ``bench run``'s workers are forked from (bench/harness/launch.py): ties its
life to the launcher's, and tells the workers whose child they are.

The server would outlive a killed launcher by itself: it leaves when the pipe from the launcher ends, and every
worker it forks holds a copy of that pipe. Dying with the launcher, it takes the workers with it (each asks to die
with the server, bench/worker.py). Imported before torch, so that a launcher killed in the seconds the server
spends importing is noticed at once (``die_with`` compares the parent it has with the one it should have).
"""

import os

from bench.harness.processes import AGENT_VARIABLE, SERVER_VARIABLE, die_with

if AGENT_VARIABLE in os.environ:
    die_with(int(os.environ[AGENT_VARIABLE]))
os.environ[SERVER_VARIABLE] = str(os.getpid())
