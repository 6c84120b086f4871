"""A worker of ``bench run``'s own launch: torchrun's agent runs this file (its ``--run-path``) in a process
forked from a server that imported torch and the suite once (bench/harness/launch.py). A sweep's ``bench run``,
forked the same way (launch.py, ``run_child``), ends through ``work`` too.

A worker started afresh imports torch, the suite and torch._dynamo (which an optimizer's construction
imports) before its first step; forked, none. ``bench run --strategy ddp --devices 4 --preset tiny`` on a
2-core VM: 10.0 CPU-s and 5.8-6.0 s with workers started afresh, 5.0-5.3 CPU-s and 4.0-4.2 s forked.

The file ends as ``python -m bench`` would end in that worker: its exit code, the traceback of what it did not
catch on its own stderr (torch's multiprocessing would only hand it to the agent), and Ctrl-C as the interrupted
process it is.
"""

import io
import logging
import os
import signal
import sys
import traceback

from bench.cli import main
from bench.harness.disturbance import open_window
from bench.harness.processes import SERVER_VARIABLE, die_with, die_with_parent


def _as_a_fresh_process() -> None:
    """Undoes what a worker forked from ``bench run`` itself (on CPUs: bench/harness/launch.py) has of torchrun's
    agent there: its signal handlers (the agent's SIGTERM would raise in the worker, which prints the traceback,
    where a fresh process ends) and the launcher's logging (its lines would lack this rank's prefix)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stop in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(stop, signal.SIG_DFL)
    for handler in logging.root.handlers[:]:
        logging.root.removeHandler(handler)


def work(argv: list[str]) -> int:
    _as_a_fresh_process()
    # The fork server, which dies with the launcher (bench/harness/fork_server.py); forked from the launcher itself
    # (on CPUs), the launcher.
    die_with(int(os.environ[SERVER_VARIABLE])) if SERVER_VARIABLE in os.environ else die_with_parent()
    open_window()  # the account of other processes' CPU time starts here (bench/harness/disturbance.py)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(write_through=True)  # as torchrun's `python -u` workers write
    try:
        return main(argv) or 0
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    code = work(sys.argv[1:])
    if code:
        raise SystemExit(code)
