"""Records in, figures and a report out: what ``python -m bench report RESULTS... --out DIR`` does."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from bench.labels import file_name
from reports import figures
from reports.capacity import largest_presets
from reports.load import Results, load, run_label
from reports.predictions import pipeline_gap_table, prediction_section, what_if_section
from reports.render import Section, write_html, write_markdown
from reports.scaling import with_scaling
from reports.tables import (
    bubble_table,
    data_parallel_family,
    fastest,
    fastest_within_memory,
    hybrid_vs_parts,
    memory_by_kind,
    results_table,
    with_verification,
)
from reports.traces import write_timeline_trace

log = logging.getLogger(__name__)


def report_from_files(paths: list[Path], out: Path) -> list[Path]:
    """Reads the records in ``paths`` and writes their report into ``out``; returns the files written.

    Raises ``RecordError`` before writing anything where a file cannot be read or holds another
    record version; torn lines are skipped with a warning and listed in the report."""
    results = load(paths)
    for path, bad in results.bad_lines:
        log.warning("%s:%d skipped: %s", path, bad.line_number, bad.reason)
    return build_report(results, out)


def build_report(results: Results, out: Path) -> list[Path]:
    """Writes ``report.md``, ``report.html`` and their PNGs into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    runs, baseline = with_scaling(results.runs)
    runs = with_verification(runs, results.verify)
    emulated = results.emulated
    sections = [_overview(results, emulated)]
    leaders = fastest(runs) if not runs.empty else None  # its `winners` column is what the predictions rank by
    if leaders is not None:
        sections.append(Section("Fastest correct strategy", [
            "For each model, device count and global batch, the fastest configuration not shown to be wrong by "
            "`bench verify` (`verified` says whether it was checked), with its median samples/s and speed-up over "
            "`single` at the same global batch. A winner is named only where its interval clears every other's; "
            "otherwise the strategies within noise of it are listed as a tie. Disturbed runs (other work on the "
            "machine) are left out.", *_emulation_note(emulated)], [leaders.drop(columns="winners")]))
        sections.append(Section("Throughput and scaling", [
            "One row per configuration, its figures the median over its repeats (each a fresh process, run round "
            "by round with the others) with the 95% percentile-bootstrap interval of that median in brackets. "
            "Speed-up is over `single` at the same global batch, model and precision, as the median of the ratios "
            "measured side by side in each round; efficiency is speed-up / devices. Where `single` has no run at a "
            "batch (out of memory, failed), the baseline is the fastest configuration at the smallest device count "
            "that ran it, named in the `baseline` column, and efficiency divides by the devices' ratio to its "
            "devices. Rows of a weak-scaling sweep "
            "say `weak` (their global batch grows with the devices). `repeats` counts the undisturbed runs, "
            "`disturbed_runs` the ones left out.", *_emulation_note(emulated)], [results_table(runs)],
            _present([figures.throughput(runs, baseline, out), figures.scaling(runs, out)])))
        sections.append(mfu_section(runs, out))
        hybrid = hybrid_vs_parts(runs)
        if not hybrid.empty:
            sections.append(Section("Hybrid against its parts", [
                "A dp x pp hybrid's efficiency over the product of ddp's efficiency on D devices and pp's on P "
                "(same schedule and micro-batches): 1.0 means data and pipeline parallelism compose without loss; "
                "empty where a part was not measured."], [hybrid]))
        memory = [figures.memory(runs, out), figures.throughput_vs_memory(runs, out)]
        by_kind = memory_by_kind(runs)
        text = [
            "By kind: MiB that the largest device of each configuration held over its first warm-up step, as "
            "torch's MemTracker (FSDPMemTracker for fsdp) sorts the step's tensors (parameters, gradients, "
            "optimizer state, activations, temporaries such as DDP's communication buckets): each kind at the "
            "larger of its value at the step's peak and at its end, `total` at the peak. Strategies whose step "
            "the tracker cannot follow "
            "(the pipelines) are absent. The figures below show the allocator's peak on GPUs and the process's "
            "peak RSS on CPUs, which there is mostly the runtime."] if not by_kind.empty else []
        frontier = fastest_within_memory(runs)
        if not frontier.empty:
            text.append("Fastest within a memory budget: for each model, device count and global batch, each "
                        "budget per device (a configuration's tracked peak) and the fastest configuration that "
                        "fits in it; only budgets that buy speed are listed.")
        capacity = largest_presets(runs)
        if not capacity.empty:
            text.append("Largest preset each strategy fits (EXTRAPOLATED, not measured): from a configuration's "
                        "tracked bytes, its state bytes per parameter (parameters, gradients, optimizer state, "
                        "buffers, gathered parameters) times each preset's parameter count, plus the rest "
                        "(activations, temporaries) scaled by the bytes each preset's forward saves for backward "
                        "(counted on the meta device); a preset fits where that is within one device's memory (on a "
                        "CPU, the host's shared among the processes). Allocator slack and the runtime's own "
                        "memory are not in it.")
        tables = [t for t in (by_kind, frontier, capacity) if not t.empty]
        sections.append(Section("Memory", text, tables, _present(memory)))
        family = data_parallel_family(runs)
        if not family.empty:
            sections.append(Section("Data-parallel family", [
                "Strategies that split the batch: ddp keeps everything whole on every device; zero1 shards the "
                "optimizer state; fsdp ZeRO-2 also the gradients and parameters between steps; ZeRO-3 also "
                "frees each block's gathered parameters after its forward (gathering them again for the "
                "backward). Memory is the tracked MiB per device (see Memory); `gathered parameters` is what "
                "fsdp's all-gathers held at the peak.", *_emulation_note(emulated)], [family],
                _present([figures.data_parallel_family(runs, out)])))
        pipeline = _present([figures.bubbles(runs, out), *_timeline(results, out)])
        if pipeline:
            sections.append(Section("Pipelines", [
                "Bubble: the fraction of the schedule's time a stage sits idle (waiting, transfers, Python). "
                "Theoretical: the schedule's own order (torch's action table for each rank) replayed with equal "
                "stages, a backward twice a forward (its input and weight halves one each) and free "
                "communication; this is (p-1)/(m+p-1) for GPipe and 1F1B and that divided by v for interleaved "
                "schedules when m is a multiple of p, and exact where those formulas are not. The update "
                "(dividing the gradients by m, the optimizer step) is not counted as idle: `update_fraction` is "
                "its own share of the step. Where the run carried its prediction, the PREDICTED timeline (the "
                "same action table replayed with the calibrated stage times and transfers) is drawn beside the "
                "measured one."],
                [bubble_table(runs)], pipeline))
    if leaders is not None:
        sections += [s for s in (prediction_section(runs, leaders), what_if_section(results.predictions)) if s]
    elif not results.predictions.empty:
        sections.append(what_if_section(results.predictions))
    if not results.verify.empty:
        columns = [c for c in ("strategy", "model", "devices", "max_param_diff", "max_loss_diff", "passed")
                   if c in results.verify.columns]
        sections.append(Section("Verification against single", [], [results.verify[columns]]))
    sections.append(_traces(results, out))
    sections.append(_fidelity(results.fidelity))
    sections.append(_not_run(results))
    sections.append(_environment(results))
    md, page = out / "report.md", out / "report.html"
    title = "Parallelism strategy comparison" + (" (EMULATED devices on CPU)" if emulated else "")
    write_markdown(title, sections, md)
    write_html(title, sections, page)
    return [md, page, *sorted(out.glob("*.png"))]


def _emulation_note(emulated: bool) -> list[str]:
    """The mark every table of emulated figures carries, as the figures do."""
    return ["EMULATED: rows marked `emulated` ran several stand-in devices on shared CPU cores; they show "
            "correctness and overheads, not GPU speed-ups."] if emulated else []


def _traces(results: Results, out: Path) -> Section:
    """Links to the traces: each pipeline run's timeline (written here) and the runs' --profile traces."""
    rows = []
    for record in (r for r in results.records if r.get("kind", "run") == "run"):
        fields = record.get("strategy_fields") or {}
        predicted = (record.get("prediction") or {}).get("predicted_timeline")
        if not (record.get("status") == "ok" and (fields.get("timeline") or record.get("profile_traces") or predicted)):
            continue
        label = run_label(record)
        if fields.get("timeline"):
            path = write_timeline_trace(fields["timeline"], out / "traces" / f"{file_name(label)}.trace.json")
            rows.append({"run": label, "trace": str(path.relative_to(out)), "what": "pipeline timeline"})
        predicted = (record.get("prediction") or {}).get("predicted_timeline")
        if predicted:
            path = write_timeline_trace(predicted, out / "traces" / f"{file_name(label)}.predicted.trace.json")
            rows.append({"run": label, "trace": str(path.relative_to(out)), "what": "PREDICTED pipeline timeline"})
        for trace in record.get("profile_traces") or []:
            rows.append({"run": label, "trace": trace, "what": "torch.profiler, last timed steps"})
    if not rows:
        return Section("Traces", ["No pipeline timelines or profiler traces among the records (`bench run --profile "
                                  "DIR` or `bench sweep --profile DIR` writes the latter)."])
    return Section("Traces", [
        "Chrome trace-event files: open them in Perfetto (https://ui.perfetto.dev, Open trace file) or TensorBoard. "
        "A pipeline timeline has one track per rank and stage, each span named by kind and micro-batch (F3: the "
        "forward of micro-batch 3); profiled runs are left out of the comparisons above."],
        [pd.DataFrame(rows).drop_duplicates()])


def _present(paths: list[Path | None]) -> list[Path]:
    return [p for p in paths if p is not None]


def _overview(results: Results, emulated: bool) -> Section:
    counts = results.failures["status"].value_counts().to_dict() if not results.failures.empty else {}
    others = "".join(f", {n} {status}" for status, n in sorted(counts.items()))
    text = [f"{len(results.runs)} configuration(s) measured{others}."]
    if emulated:
        text.append(
            f"{figures.warning_for(results.runs)}. Rows and plots marked emulated measure how the strategies' work and "
            "communication overlap on shared CPU cores; read them for correctness and overheads, not for GPU speed-ups."
        )
    return Section("Overview", text)


def mfu_section(runs: pd.DataFrame, out: Path) -> Section:
    """The MFU figure where some run knew its devices' peak FLOP/s, else why there is none."""
    figure = figures.mfu(runs, out)
    if figure is None:
        return Section("MFU", [
            "MFU is left out: no run knows its devices' peak FLOP/s. Only GPUs listed in `bench/devices.py` "
            "(`PEAK_FLOPS`) have one, or a peak given to `bench run --peak-tflops`; a made-up peak would make a "
            "made-up MFU."])
    return Section("MFU", [
        "Model FLOPs utilisation: forward+backward FLOPs per sample (counted by `torch.utils.flop_counter`) "
        "times samples/s, over the devices' peak FLOP/s times the device count."], [], [figure])


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


def _fidelity(fidelity: pd.DataFrame) -> Section:
    """``bench fidelity``'s comparisons: each measured figure, its target and whether it was met."""
    section = Section("How far to trust these numbers")
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
            "those above it, the last row the full prediction; `measured` is the comparison's own figure.")
        section.tables.append(gap)
    return section


def _timeline(results: Results, out: Path) -> list[Path | None]:
    """The Gantt chart of the last pipeline record that kept its micro-batch events, and beside it the
    timeline its prediction replayed, where it carried one (labelled PREDICTED)."""
    for record in reversed(results.records):
        events = (record.get("strategy_fields") or {}).get("timeline")
        if record.get("status") == "ok" and events and record.get("kind", "run") == "run":
            title = (
                f"One step of {record['strategy']} ({record['config'].get('schedule')}, "
                f"m={record['config'].get('microbatches')}) on {record['device_count']} ranks, {record['model']}"
            )
            flags = pd.DataFrame([{"emulated": record["emulated"], "oversubscribed": record.get("oversubscribed")}])
            predicted = (record.get("prediction") or {}).get("predicted_timeline")
            return [figures.timeline(events, f"{title}: measured", flags, out),
                    figures.timeline(predicted, f"{title}: PREDICTED", flags, out, "pipeline_timeline_predicted")
                    if predicted else None]
    return []


def _not_run(results: Results) -> Section:
    section = Section("Skipped, failed, timed-out and unreadable")
    if not results.failures.empty:
        section.tables.append(results.failures)
    if results.bad_lines:
        section.tables.append(pd.DataFrame(
            [{"file": str(p), "line": b.line_number, "reason": b.reason} for p, b in results.bad_lines]))
    if not section.tables:
        section.paragraphs.append("None: every configuration produced a record.")
    return section


def _environment(results: Results) -> Section:
    envs = {}
    for record in results.records:
        env = record.get("env") or {}
        key = (env.get("hostname"), env.get("torch"), tuple(env.get("gpu_names") or ()))
        envs[key] = env
    rows = [{k: v for k, v in env.items() if k != "topology"} for env in envs.values()]
    section = Section("Environment", tables=[pd.DataFrame(rows)] if rows else [])
    topologies = {env.get("topology") for env in envs.values() if env.get("topology")}
    if topologies:
        section.preformatted = "\n\n".join(sorted(topologies))
    return section
