"""Plain ``logging`` with the rank in every line, so interleaved output of several processes reads."""

from __future__ import annotations

import logging
import os


def configure_logging(verbose: bool = False) -> None:
    rank = os.environ.get("RANK")
    prefix = f"[rank {rank}] " if rank is not None else ""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # matplotlib narrates its axis-unit guesses at INFO; the report's own lines are what matter.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
