"""``pp``: every schedule this torch offers trains like ``single`` on 2 gloo ranks; the CLI end to end; bad input.

All pipeline runs share one spawned process group (``run_ranks_sequence``): forming a group
costs seconds, a tiny run a fraction of one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from bench.harness.config import RunConfig, resolve
from bench.harness.records import read_records
from bench.harness.runner import global_losses
from strategies import timing
from strategies.pipeline import torch_refusal
from strategies.schedules import BY_NAME, available_schedules
from strategies.timing import RankTiming, StepLog, StepTimer, pipeline_fields, timed_step
from tests.helpers.cli import BenchRun, run_in_process
from tests.helpers.clock import FakeClock
from tests.helpers.equivalence import assert_matches_reference, reference
from tests.helpers.ranks import merged_state, run_ranks_sequence

SCHEDULES = available_schedules()
RUNNABLE = [name for name in SCHEDULES if torch_refusal(BY_NAME[name], "gloo") is None]
"""On torch 2.11 the V-shaped schedules are refused on gloo (strategies/pipeline.py says why)."""
BASE = RunConfig.from_flags(strategy="pp", model="mlp", preset="tiny", devices=2, steps=3, warmup=1, microbatches=4)


def _config(**changes: object) -> RunConfig:
    return BASE.with_flags(**changes)


CONFIGS = {
    **{
        f"mlp-{name}": _config(schedule=name, stages_per_rank=BY_NAME[name].min_v if BY_NAME[name].multi_stage else 1)
        for name in RUNNABLE
    },
    "rnn-gpipe": _config(model="rnn"),
    "transformer-gpipe": _config(model="transformer"),
    "cnn-gpipe-time-balance": _config(model="cnn", norm="group", balance="time"),
}
# With v = 2 the multi-stage schedules run 4 stages on the 2 ranks (mlp tiny has 5 blocks).
assert {c.pipeline.stages_per_rank for c in CONFIGS.values()} <= {1, 2}
THEORETICAL_BUBBLE = {"gpipe": 1 / 5, "1f1b": 1 / 5, "interleaved-1f1b": 1 / 9, "looped-bfs": 1 / 9,
                      "interleaved-zb": 1 / 13, "zbv": 1 / 25, "dualpipev": 1 / 25}
"""p = 2, m = 4: (p-1)/(m+p-1) for gpipe and 1f1b, divided by v = 2 for the interleaved ones; the zero-bubble
ones replayed by hand as tests/test_action_tables.py draws them (F = I = W = 1, B = 2)."""


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[RunConfig, list]]:
    folder = tmp_path_factory.mktemp("pp")
    configs = {k: resolve(c.with_flags(out=str(folder / "r.jsonl"))) for k, c in CONFIGS.items()}
    results = run_ranks_sequence(list(configs.values()), world_size=2, folder=folder, timeout_s=400)
    return {k: (c, r) for (k, c), r in zip(configs.items(), results, strict=True)}


@pytest.mark.distributed
@pytest.mark.parametrize("case", list(CONFIGS))
def test_pp_trains_like_one_device(case: str, pipeline_runs: dict[str, tuple[RunConfig, list]]) -> None:
    config, results = pipeline_runs[case]
    losses = global_losses(results[0].ranks)
    assert len(losses) == 4 and losses[0] != losses[-1]
    assert_matches_reference(losses, merged_state(results), reference(config))

    fields = results[0].strategy_fields
    stages = 2 * config.pipeline.stages_per_rank
    assert fields["schedule"] == config.pipeline.schedule and fields["stages"] == stages and fields["backend"] == "gloo"
    # Only the rank that holds the last stage reports a loss.
    last_rank = next(r for r, held in enumerate(fields["stages_of_rank"]) if stages - 1 in held)
    for rank, stats in enumerate(results[0].ranks):
        assert all((loss is None) == (rank != last_rank) for loss in stats.losses)
    # The timeline: every stage forwards and backwards every micro-batch once (B, or I then W).
    timeline = fields["timeline"]
    kinds = [(s["stage"], s["microbatch"], s["kind"]) for s in timeline]
    assert sorted(k for k in kinds if k[2] == "F") == [(s, i, "F") for s in range(stages) for i in range(4)]
    input_grads = sorted((s, i) for s, i, k in kinds if k in "BI")
    assert input_grads == [(s, i) for s in range(stages) for i in range(4)]
    assert sorted((s, i) for s, i, k in kinds if k == "W") == sorted((s, i) for s, i, k in kinds if k == "I")
    assert {s["rank"] for s in timeline} == {0, 1}
    assert 0 < fields["measured_bubble_fraction"] < 1 and fields["stage_imbalance"] >= 1
    assert len(fields["stage_busy_ms"]) == stages and len(fields["stage_peak_mem_bytes"]) == 2
    assert fields["theoretical_bubble_fraction"] == pytest.approx(THEORETICAL_BUBBLE[config.pipeline.schedule])
    # A rank computes one thing at a time, inside its step: a timer that timed the wrong interval (from the
    # step's start, or across the wait for a neighbour) would overlap its spans or run past the step.
    for rank in (0, 1):
        mine = sorted((s["start_ms"], s["end_ms"]) for s in timeline if s["rank"] == rank)
        assert all(start <= end for start, end in mine)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(mine, mine[1:], strict=False)), mine
    # The update (scaling by 1/m, the optimizer step) is timed apart from the schedule.
    assert fields["update_ms"] > 0 and 0 < fields["update_fraction"] < 1 and fields["schedule_ms"] > 0


@pytest.mark.distributed
def test_bench_run_pp_end_to_end(pp_run: BenchRun) -> None:
    assert pp_run.proc.returncode == 0, pp_run.proc.stderr[-3000:]
    records, bad = read_records(pp_run.out)
    assert bad == [] and len(records) == 1
    record = records[0]
    assert record["strategy"] == "pp" and record["processes"] == 2 and record["device_count"] == 2
    assert record["emulated"] is True and len(record["losses"]) == 4 and len(record["step_times_ms"]) == 3
    fields = record["strategy_fields"]
    assert fields["schedule"] == "gpipe" and fields["microbatches"] == 4 and fields["balance"] == [3, 2]
    assert fields["theoretical_bubble_fraction"] == pytest.approx(1 / 5)
    assert fields["stages_of_rank"] == [[0], [1]]
    assert len(fields["timeline"]) == 2 * 2 * 4 and {s["rank"] for s in fields["timeline"]} == {0, 1}


BAD_SPLITS = [
    (["--strategy", "mp", "--devices", "6"], "cannot split 5 blocks into 6 stages"),
    (["--strategy", "pp", "--devices", "2", "--schedule", "looped-bfs", "--stages-per-rank", "3"],
     "cannot split 5 blocks into 6 stages"),
    (["--strategy", "mp", "--devices", "2", "--balance", "3,1,1"], "balance [3, 1, 1] has 3 stages, but the run has 2"),
    (["--strategy", "pp", "--devices", "2", "--balance", "3,3"],
     "balance [3, 3] sums to 6, but the model has 5 blocks"),
    (["--strategy", "mp", "--devices", "2", "--microbatches", "3"],
     "global batch 8 is not divisible by 3 micro-batches"),
    (["--strategy", "pp", "--devices", "2", "--batch-size", "4", "--microbatches", "8"],
     "global batch 4 has fewer samples than --microbatches 8"),
    (["--strategy", "pp", "--devices", "2", "--schedule", "interleaved-1f1b", "--microbatches", "4"],
     "schedule 'interleaved-1f1b' needs at least 2 stage(s) per rank, got --stages-per-rank 1"),
    (["--strategy", "pp", "--devices", "2", "--schedule", "interleaved-1f1b", "--stages-per-rank", "2",
      "--batch-size", "10", "--microbatches", "5"], "--microbatches 5 is not a multiple of its 2 rounds (try 4)"),
    (["--strategy", "pp", "--devices", "2", "--schedule", "chimera"],
     f"unknown schedule 'chimera'; this torch offers {', '.join(SCHEDULES)}"),
    (["--strategy", "mp", "--devices", "2", "--schedule", "1f1b"], "--schedule 1f1b is for pp"),
]


@pytest.mark.parametrize(("args", "message"), BAD_SPLITS, ids=[" ".join(a[1:]) for a, _ in BAD_SPLITS])
def test_bad_split_is_one_clear_line(
    args: list[str], message: str, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_in_process(capsys, "run", "--model", "mlp", "--preset", "tiny", "--out", str(results), *args)
    assert code == 2
    assert err.count("\n") == 1, err
    assert message in err
    assert not results.exists()


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.14.1"])
def test_v_shaped_schedules_are_refused_on_gloo_before_torch_2_14(version: str) -> None:
    refusal = torch_refusal(BY_NAME["zbv"], "gloo", version)
    if version.startswith("2.11"):
        assert refusal is not None and f"needs torch 2.14 or newer: torch {version} sends a rank" in refusal
    else:
        assert refusal is None
    assert torch_refusal(BY_NAME["zbv"], "nccl", version) is None
    assert torch_refusal(BY_NAME["interleaved-zb"], "gloo", version) is None


@pytest.mark.skipif(not set(SCHEDULES) - set(RUNNABLE), reason="this torch runs every schedule it offers on gloo")
def test_a_refused_schedule_is_one_line_before_any_process_starts(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = sorted(set(SCHEDULES) - set(RUNNABLE))[0]
    args = ["--strategy", "pp", "--devices", "2", "--schedule", refused, "--stages-per-rank", "2",
            "--microbatches", "4"]
    code, err = run_in_process(capsys, "run", "--model", "mlp", "--preset", "tiny", "--out", str(results), *args)
    assert code == 2 and err.count("\n") == 1 and "on gloo needs torch 2.14 or newer" in err, err
    assert not results.exists()


# GPipe, p = 2, m = 2, drawn in ms (F = 1, B = 2), then a 0.5 ms update on each rank:
#   rank 0   F0 F1 .  .  .  B0 B0 B1 B1        busy 6 of the slowest rank's 9: bubble 1/3
#   rank 1   .  F0 F1 B0 B0 B1 B1              busy 6 of 9: bubble 1/3
GPIPE_2X2 = {0: [("F", 0, 1), ("F", 1, 1), (None, 0, 3), ("B", 0, 2), ("B", 1, 2)],
             1: [(None, 0, 1), ("F", 0, 1), ("F", 1, 1), ("B", 0, 2), ("B", 1, 2)]}


@contextlib.contextmanager
def _span_from_step_start(self: StepTimer, stage: int, microbatch: int, kind: str, device: torch.device):  # noqa: ANN202
    """A broken stage timer: every span timed from the step's start instead of its own."""
    yield
    self._marks.append((stage, microbatch, kind, device, self._origin[device], timing.time.perf_counter()))


@pytest.mark.parametrize("broken", [None, "span timed from the step's start"])
def test_the_bubble_of_a_hand_built_gpipe_timeline_is_one_third(
    broken: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)
    if broken:
        monkeypatch.setattr(StepTimer, "span", _span_from_step_start)
    cpu = torch.device("cpu")
    per_rank = []
    for rank, actions in GPIPE_2X2.items():
        clock.now = 100.0  # both ranks start the step at once
        timer, log = StepTimer(), StepLog(warmup=0)
        with timed_step(timer, log, [cpu]) as step_clock:
            for kind, microbatch, ms in actions:
                with timer.span(rank, microbatch, kind, cpu) if kind else contextlib.nullcontext():
                    clock.now += ms / 1e3
            with step_clock.update():
                clock.now += 0.5e-3
        per_rank.append(RankTiming.of(log, rank, [[rank]]))
    fields = pipeline_fields(per_rank)
    spans = sorted((s["rank"], s["start_ms"], s["end_ms"]) for s in fields["timeline"])
    overlapping = any(a[0] == b[0] and a[2] > b[1] for a, b in zip(spans, spans[1:], strict=False))
    if broken:  # the bubble is off, and the real runs' check (no rank's spans overlap) sees it
        assert fields["measured_bubble_fraction"] != pytest.approx(1 / 3) and overlapping
        return
    assert fields["schedule_ms"] == pytest.approx(9.0) and fields["update_ms"] == pytest.approx(0.5)
    assert fields["stage_busy_ms"] == pytest.approx([6.0, 6.0]) and not overlapping
    assert fields["measured_bubble_fraction_per_device"] == pytest.approx([1 / 3, 1 / 3])
    assert fields["measured_bubble_fraction"] == pytest.approx(1 / 3)
    assert fields["update_fraction"] == pytest.approx(0.5 / 9.5)
    assert (1, 1, "B", pytest.approx(5.0), pytest.approx(7.0)) in [
        (s["rank"], s["microbatch"], s["kind"], s["start_ms"], s["end_ms"]) for s in fields["timeline"]]
