"""What ``quick`` means (the root conftest.py marks every test not marked distributed, launches or gpu):
the test starts no Python process. Inside ``no_python_processes`` one that tries fails with the reason."""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock


class StartedAProcess(AssertionError):
    """A test marked quick started a Python process: mark it ``launches`` (or ``distributed``)."""


def _refuse(what: str) -> StartedAProcess:
    return StartedAProcess(f"{what} from a quick test: mark the test @pytest.mark.launches or "
                           "@pytest.mark.distributed (conftest.py)")


def _python_argv(args: str | os.PathLike | list) -> bool:
    """Whether a Popen argv starts Python or torchrun (git, nvidia-smi and the like are cheap and allowed)."""
    program = str(args).split()[0] if isinstance(args, str) else str(args if isinstance(args, os.PathLike) else args[0])
    return Path(program).name.startswith(("python", "torchrun")) or program == sys.executable


@contextlib.contextmanager
def no_python_processes() -> Iterator[None]:
    popen_init = subprocess.Popen.__init__

    def guarded_popen(self: subprocess.Popen, args: str | os.PathLike | list, *rest: object, **kwargs: object) -> None:
        if _python_argv(args):
            raise _refuse(f"subprocess {args!r}")
        popen_init(self, args, *rest, **kwargs)

    def refuse_start(self: multiprocessing.process.BaseProcess) -> None:
        raise _refuse(f"multiprocessing {self!r}")

    def refuse_fork() -> int:
        raise _refuse("os.fork()")

    with mock.patch.object(subprocess.Popen, "__init__", guarded_popen), \
            mock.patch.object(multiprocessing.process.BaseProcess, "start", refuse_start), \
            mock.patch.object(os, "fork", refuse_fork):
        yield
