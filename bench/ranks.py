"""Processes that pose as torchrun's ranks: the fidelity benchmark and the tests spawn them.

torchrun would start a fresh interpreter per rank for every run; the fidelity benchmark and the
tests keep one group of ranks for many runs instead (forming a group costs seconds, a tiny run a
fraction of one), so they spawn the ranks themselves and each calls ``become_rank`` first.
"""

from __future__ import annotations

import os

from bench.disturbance import open_window
from bench.processes import die_with_parent
from strategies.distributed import RENDEZVOUS_FILE_VARIABLE


def become_rank(rank: int, world_size: int, folder: str) -> None:
    """Makes this spawned process torchrun's rank ``rank`` of ``world_size`` on this node.

    Sets torchrun's variables and a file rendezvous in ``folder`` (which every rank of the group
    shares), and ties the process's life to its parent's, as ``bench run`` does for its workers."""
    die_with_parent()
    open_window()
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size)
    )
    os.environ[RENDEZVOUS_FILE_VARIABLE] = os.path.join(folder, "rendezvous")
