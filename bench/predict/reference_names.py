"""How a calibration names its reference runs: ``strategy@batch``, a strategy's variant ``pp/interleaved@batch``, an
in-process run at other threads than every core's ``mp/1-thread@batch`` (bench/predict/runtime.py fits each one's
residual; bench/predict/calibrate.py groups them by batch)."""

from __future__ import annotations

from bench.harness.config import RunConfig
from strategies import Launch, strategy_class
from strategies.cost_model import threads_per_process


def in_process(strategy: str) -> bool:
    """A reference run of one process, timed where calibration runs rather than on the ranks."""
    return strategy_class(strategy).launch == Launch.IN_PROCESS


VARIANT = "/"
"""Between a strategy's name and its reference variant's (``CostModel.reference_variants``): ``pp/interleaved``."""


def variant_name(strategy: str, variant: str) -> str:
    return strategy + VARIANT + variant


def strategy_of(reference: str) -> str:
    """The strategy a reference run's name (``variant_name``) runs."""
    return reference.partition(VARIANT)[0]


THREADS = "-thread"
"""Ends the variant of an in-process reference run timed at other threads than every core's: ``mp/1-thread``."""


def rank_threads(accelerator: str, ranks: int) -> int | None:
    """The threads an in-process reference run (mp) on ``ranks`` stages is timed at beyond every core's, as a sweep's
    one-process run computes: on a CPU one rank's share, as ``bench fidelity`` times mp beside a pp rank
    (``StagesInTurnCost``: what mp takes beyond its blocks moves with its threads); None: no other."""
    share = threads_per_process(ranks)
    return share if accelerator == "cpu" and share != threads_per_process(1) else None


def with_thread_variants(references: dict[str, RunConfig], ranks: int) -> dict[str, RunConfig]:
    """``references`` (named ``strategy@batch``) with each in-process run again at ``rank_threads``, named
    ``strategy/N-thread@batch``."""
    out = dict(references)
    for name, config in references.items():
        if in_process(config.strategy) and (threads := rank_threads(config.run.accelerator, ranks)) is not None:
            strategy, at, batch = name.partition("@")
            out[variant_name(strategy, f"{threads}{THREADS}") + at + batch] = config
    return out


def threads_of(reference: str) -> int | None:
    """The threads a reference run's name says it ran with (``with_thread_variants``); None: its launch's own."""
    variant = reference.partition(VARIANT)[2].partition("@")[0].partition(":")[0]
    return int(variant.removesuffix(THREADS)) if variant.endswith(THREADS) else None
