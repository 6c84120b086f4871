"""Memory by kind, exactly where the arithmetic is known (bench/harness/memory.py, torch's MemTracker)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import models
from bench.harness.config import RunConfig, resolve
from bench.harness.records import read_records
from bench.harness.runner import train
from strategies.devices import peak_memory, reset_peak_memory
from tests.helpers.cli import BenchRun


def _bytes(model: str = "mlp") -> int:
    return sum(p.numel() * p.element_size() for p in models.build_model(model, "tiny").blocks.parameters())


def _tracked(tmp_path: Path, **changes: object) -> list[dict]:
    config = resolve(RunConfig.from_flags(model="mlp", preset="tiny", steps=1, warmup=1, out=str(tmp_path / "r.jsonl"),
                                          **changes))
    ranks = train(config).ranks
    return [device for r in ranks for device in r.memory_by_kind]


def test_single_with_sgd_momentum_holds_parameters_gradients_and_state_of_4_bytes_each(tmp_path: Path) -> None:
    (device,) = _tracked(tmp_path)
    numel_bytes = _bytes()  # fp32: 4 bytes x numel
    assert device["parameters"] == device["gradients"] == device["optimizer_state"] == numel_bytes
    assert device["total"] >= 3 * numel_bytes


def test_activations_are_taken_where_they_peak_and_grow_with_the_batch(tmp_path: Path) -> None:
    # At the step's total peak (mid-backward) most activations are already freed: read there, they
    # would not grow with the batch. The tracker's module snapshots see them at the forward's end.
    (small,) = _tracked(tmp_path, batch_size=16)
    (large,) = _tracked(tmp_path, batch_size=32)
    assert small["activations"] > 16 * 4  # more than one float per sample
    assert large["activations"] == pytest.approx(2 * small["activations"], rel=0.05)


def test_adam_holds_two_states_per_parameter(tmp_path: Path) -> None:
    (device,) = _tracked(tmp_path, optimizer="adam")
    # exp_avg and exp_avg_sq per parameter (and small step counters): two states where SGD keeps one.
    assert 2 * _bytes() <= device["optimizer_state"] < 3 * _bytes()


def test_mp_stages_hold_the_model_between_them(tmp_path: Path) -> None:
    devices = _tracked(tmp_path, strategy="mp", devices=2, batch_size=8)
    assert sum(d["parameters"] for d in devices) == _bytes()  # emulated: one CPU holds both stages


def test_micro_batched_mp_says_why_it_is_not_tracked(tmp_path: Path) -> None:
    config = resolve(RunConfig.from_flags(strategy="mp", devices=2, microbatches=2, batch_size=8, model="mlp",
                                          preset="tiny",
                               steps=1, warmup=1, out=str(tmp_path / "r.jsonl")))
    (rank,) = train(config).ranks
    assert rank.memory_by_kind is None and "once per micro-batch" in rank.memory_error


def test_without_a_warm_up_step_nothing_is_tracked(tmp_path: Path) -> None:
    config = resolve(RunConfig.from_flags(model="mlp", preset="tiny", steps=1, warmup=0, out=str(tmp_path / "r.jsonl")))
    assert train(config).ranks[0].memory_by_kind is None


def test_a_run_told_not_to_track_says_so(tmp_path: Path) -> None:
    """The tracker slows every op of its step: the small mlp's fsdp's first step on 2 ranks took 840 ms tracked and
    290 untracked (a calibration's reference runs read no memory)."""
    config = resolve(RunConfig.from_flags(model="mlp", preset="tiny", steps=1, warmup=1, memory_by_kind=False,
                                          out=str(tmp_path / "r.jsonl")))
    (rank,) = train(config).ranks
    assert rank.memory_by_kind is None and "--no-memory-by-kind" in rank.memory_error


@pytest.mark.distributed
def test_ddp_holds_a_whole_copy_per_device_and_pipelines_say_why_they_are_not_tracked(
        ddp_run: BenchRun, pp_run: BenchRun) -> None:
    for run in (ddp_run, pp_run):
        assert run.proc.returncode == 0, run.proc.stderr[-2000:]
    ((ddp,), _), ((pp,), _) = read_records(ddp_run.out), read_records(pp_run.out)
    assert [(d["rank"], d["parameters"], d["gradients"]) for d in ddp["memory_by_kind"]] == [
        (0, _bytes(), _bytes()), (1, _bytes(), _bytes())]
    assert all(d["temporaries"] >= _bytes() for d in ddp["memory_by_kind"])  # DDP's gradient buckets
    assert pp["memory_by_kind"] is None and "cannot follow" in pp["memory_by_kind_source"]


def test_the_cpu_peak_starts_anew_at_each_reset() -> None:
    cpu = [torch.device("cpu")]
    reset_peak_memory(cpu)
    block = torch.ones(256 * 2**20, dtype=torch.uint8)  # 256 MiB, touched
    (high,), _ = peak_memory(cpu)
    del block
    reset_peak_memory(cpu)
    (low,), source = peak_memory(cpu)
    assert source == "process_peak_rss"
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("only Linux can reset a process's peak resident set")
    assert high - low > 200 * 2**20  # the 256 MiB are no longer in the peak


def test_the_tracked_steps_leave_an_untracked_warm_up_step_before_the_timed_ones() -> None:
    from bench.harness.memory import tracked_steps

    # The second step holds the optimizer's state throughout; tracked as the last warm-up step, it slowed the
    # next two timed steps of fsdp ZeRO-3 (bench/harness/memory.py), so it is tracked only with a third one after.
    assert [tracked_steps(warmup) for warmup in range(5)] == [(), (0,), (0,), (0, 1), (0, 1)]


def test_the_batch_is_the_datas_memory_not_an_activation_even_where_the_step_views_it() -> None:
    """DTensor's ``from_local`` views the batch where a tp plan's first layer takes it (the mlp's): MemTracker then
    counted the batch as an activation (the small mlp's tp 0.25 MiB over its prediction on 2 and 4 ranks)."""
    from torch import nn

    from bench.harness.memory import MemoryByKind

    class Viewed(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view_as(x)

    def tracked(batch_given: bool) -> dict:
        model = nn.Sequential(Viewed(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        optimizer, loss_fn = torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss()
        inputs, targets = torch.randn(64, 256), torch.randint(10, (64,))
        memory = MemoryByKind((0,))
        with memory.track(model, optimizer, loss_fn, (inputs, targets) if batch_given else ()):
            optimizer.zero_grad()
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
        assert memory.peaks is not None
        return memory.peaks[0]

    relu_output = batch = 64 * 256 * 4
    device = tracked(batch_given=True)
    assert relu_output <= device["activations"] < relu_output + batch / 2  # the ReLU's output and the loss's
    assert device["other"] == batch + 64 * 8  # the inputs and the int64 targets
    assert tracked(batch_given=False)["activations"] >= relu_output + batch  # as MemTracker counts it alone


def test_zero1s_state_is_tracked_where_it_lives_in_the_optimizer_it_wraps(tmp_path: Path) -> None:
    """ZeroRedundancyOptimizer keeps its shard's state in the optimizer it wraps: left unregistered, the second
    step's peak held no optimizer state (zero1 on the small transformer at 2 ranks: 67.31 MiB, 74.38 with it). On
    one rank it holds what plain SGD holds, so the tracker must read the same."""
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from bench.harness.memory import MemoryByKind

    def second_step(zero: bool) -> dict:
        torch.manual_seed(0)
        model, loss_fn = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)), nn.CrossEntropyLoss()
        optimizer = (ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9)
                     if zero else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        # a batch whose activations dwarf the model: the step peaks in its backward, where the state is held
        inputs, targets = torch.randn(4096, 256), torch.randint(10, (4096,))
        memory = MemoryByKind((0, 1))
        for _ in memory.steps:  # the state exists from the first step's end, so the second holds it throughout
            memory.peaks = None  # this step's own figures
            with memory.track(model, optimizer, loss_fn, (inputs, targets)):
                optimizer.zero_grad()
                loss_fn(model(inputs), targets).backward()
                optimizer.step()
        assert memory.peaks is not None
        return memory.peaks[0]

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    try:
        zero1, plain = second_step(zero=True), second_step(zero=False)
    finally:
        dist.destroy_process_group()
    assert zero1["optimizer_state"] == plain["optimizer_state"] > 0
    assert zero1["total"] == plain["total"]


def test_ddps_buckets_rebuilt_in_the_second_forward_count_among_its_temporaries() -> None:
    from bench.harness.memory import _larger

    # The small transformer, ddp on 4 ranks, as tracked (MiB): the first step holds its buckets (14.12) as
    # temporaries; the second step's forward makes them again, activations to the tracker (18.53 -> 32.65), and its
    # peak holds 2.00 of the loss's gradients beside them.
    mib = 2**20
    first = [{"device": "cpu", "activations": int(18.53 * mib), "temporaries": int(14.12 * mib), "total": 56 * mib}]
    second = [{"device": "cpu", "activations": int(32.65 * mib), "temporaries": 2 * mib, "total": 62 * mib}]
    merged = _larger(first, second)[0]
    assert merged["temporaries"] == 2 * mib + int(32.65 * mib) - int(18.53 * mib)  # 16.12: the buckets and the loss's
    assert merged["activations"] == int(18.53 * mib) and merged["total"] == 62 * mib
    # a step whose forward makes nothing more than the first's keeps each kind's larger figure
    same = [{"device": "cpu", "activations": int(18.53 * mib), "temporaries": 2 * mib, "total": 60 * mib}]
    assert _larger(first, same)[0]["temporaries"] == int(14.12 * mib)
