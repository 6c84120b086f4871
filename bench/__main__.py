"""``python -m bench``: see bench/cli.py."""

import atexit
import os
import sys

from bench.harness.allocator import keep_freed_memory
from bench.harness.disturbance import open_window
from bench.harness.processes import die_with_parent

if "LOCAL_RANK" in os.environ:
    # A worker of a torchrun the user started: tie its life to torchrun's before the seconds it takes to import torch.
    die_with_parent()
keep_freed_memory()  # before torch allocates anything: bench/harness/allocator.py
open_window()  # the account of other processes' CPU time starts here (bench/harness/disturbance.py)

from bench.cli import main  # noqa: E402

code = main()
# Every result is written and closed by now. The interpreter's own teardown with torch loaded (freeing
# its modules and C++ state) took 1.2-1.5 s per process on a 2-core VM, after the work: a sweep pays it
# for every run, and torchrun waits for it in each worker. Exit handlers still run; the teardown is skipped.
atexit._run_exitfuncs()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code or 0)
