"""How far to trust these numbers: ``bench fidelity``'s comparisons of the harness with hand-written loops."""

from __future__ import annotations

from reports import figures
from reports.context import Context
from reports.predictions import pipeline_gap_table
from reports.render import Section

# One sentence per kind of ``bench fidelity`` comparison, shown for those present.
FIDELITY_EXPLAINED = {
    "single-vs-plain-loop": "single vs plain loop: the `single` strategy's median step time over the PyTorch "
    "tutorials' plain training loop on the same model, batch and threads, alternated round by round in one "
    "process; near 1 means the harness adds nothing of its own to what it times.",
    "ddp-vs-plain-ddp": "ddp vs plain DDP script: the `ddp` strategy on 2 processes over the DDP tutorial's "
    "hand-written script, same model, global batch and process group; near 1 means the strategy costs no more "
    "than DDP itself.",
    "fsdp-vs-plain-fsdp": "fsdp vs plain FSDP2 script: the `fsdp` strategy on 2 processes over the FSDP2 tutorial's "
    "hand-written script (`fully_shard` each block, then the root), same model, global batch, resharding and process "
    "group; near 1 means the strategy costs no more than FSDP2 itself.",
    "pp-vs-mp": "pp vs mp: the pipeline's speed-up over running the same stages one after another (`mp`), as a "
    "share of the ideal p·m/(m+p-1); the row with mp on one pp rank's threads is held to the target, the one with "
    "mp on all the cores says whether pipelining beats intra-op threads.",
    "pp-bubble": "pp bubble: the measured idle fraction of a pipeline step (which also counts transfers and "
    "Python overhead) against the schedule's simulated theoretical bubble (equal stages, free transfers), for m >= 4p "
    "micro-batches.",
}
FIDELITY_HINT = (
    "No fidelity records were given. Run `python -m bench fidelity --out results/fidelity.jsonl`, then pass "
    "that file to `bench report` with the others (`python -m bench report results/sweep.jsonl "
    "results/verify.jsonl results/fidelity.jsonl`)."
)


def section(ctx: Context) -> Section:
    """``bench fidelity``'s comparisons: each measured figure, its target and whether it was met."""
    fidelity = ctx.results.fidelity
    section = Section("How far to trust these numbers", appendix=True)
    if fidelity.empty:
        section.paragraphs.append(FIDELITY_HINT)
        return section
    present = set(fidelity["comparison"])
    section.paragraphs.append(
        "Each figure is the median over every timed step of its rounds (the two sides alternated round by round); "
        "in brackets, the 95% percentile-bootstrap interval over rounds (resampled in pairs, as the two sides of a "
        "round ran back to back). `met` judges the median; where the interval crosses the target's bound it adds "
        "`not settled`: more rounds would be needed to say.")
    section.paragraphs += [text for kind, text in FIDELITY_EXPLAINED.items() if kind in present]
    warning = figures.warning_for(fidelity)
    if warning:
        section.paragraphs.append(f"{warning}. Rows marked emulated time several processes sharing the CPU's cores: "
                                  "they say what the harness costs there, not how a GPU machine would do.")
    columns = ["name", "model", "measured", "target", "met", "machine", "emulated"]
    section.tables.append(fidelity[columns].rename(columns={"name": "comparison"}))
    gap = pipeline_gap_table(fidelity)
    if not gap.empty:
        section.paragraphs.append(
            "Why pp falls short of the ideal, PREDICTED by the calibrated model (`bench calibrate` of this machine): "
            "the speed-up with the ideal's assumptions dropped one at a time, each row adding one measured cost to "
            "those above it, the last row the full prediction; `measured` is the comparison's own figure, with its "
            "interval over the rounds, whether the full prediction lands inside it, and each side's full PREDICTED "
            "step against the step the comparison measured (the side an account misses on).")
        section.tables.append(gap)
    return section
