"""Imported first by every fork server the suite starts (bench/harness/ranks.py): ties the server's life to the
process that started it, and tells what it forks whose child they are.

A server leaves when the pipe from its starter ends, but every process it forks holds a copy of that pipe: left
alone it would outlive a killed starter, and so would they. Dying with its starter (``bench run``'s agent, named in
``BENCH_AGENT_PID``; else its parent: a sweep, a calibration, pytest), it takes them with it, each asking to die
with the server. Imported before torch, so that a starter killed in the seconds the server spends importing is
noticed at once (``die_with`` compares the parent it has with the one it should have). Its malloc keeps
what it frees before anything is allocated, and so does everything it forks (bench/harness/allocator.py).
"""

import os

from bench.harness.allocator import keep_freed_memory
from bench.harness.processes import AGENT_VARIABLE, SERVER_VARIABLE, die_with, die_with_parent

if AGENT_VARIABLE in os.environ:
    die_with(int(os.environ[AGENT_VARIABLE]))
else:
    die_with_parent()
os.environ[SERVER_VARIABLE] = str(os.getpid())
keep_freed_memory()
