"""The plain single-device training loop of the PyTorch tutorials, with a clock around each step.

python -m bench.experiments.baselines.plain_loop --model cnn --preset small --steps 20

It is written apart from the suite on purpose: its own optimizer (SGD, lr 0.01, momentum 0.9, the
suite's defaults), its own batches (a DataLoader over the dataset, in order), its own step. So it is
both the baseline of ``single``'s speed (bench/experiments/fidelity/loops.py) and an independent reference for
``single``'s losses and parameters (tests/test_baselines.py).
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

import models
from models.data import RandomDataset


@dataclass(frozen=True)
class PlainRun:
    """What the textbook loop saw: its timed steps, every step's loss and the trained parameters."""

    step_times_s: list[float]
    """Seconds per timed step (after ``warmup``)."""
    losses: list[float]
    """The loss of every step, warm-up included."""
    state: dict[str, torch.Tensor]
    """The model's state after the last step, on the CPU."""


def plain_loop(model: str, preset: str, batch_size: int, steps: int, warmup: int, seed: int = 0,
               device: str = "cpu", norm: str = "batch") -> PlainRun:
    """The textbook loop: zero_grad, forward, loss, backward, step, over ``warmup + steps`` batches."""
    torch.manual_seed(seed)
    spec = models.build_model(model, preset, norm)
    net = spec.blocks.to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    dataset = RandomDataset(spec, 4 * batch_size, seed=seed)
    batches = itertools.islice(itertools.cycle(DataLoader(dataset, batch_size=batch_size)), warmup + steps)
    times, losses = [], []
    for step, (inputs, targets) in enumerate(batches):
        inputs, targets = inputs.to(device), targets.to(device)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = spec.loss_fn(net(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # the tutorials print the loss; reading it waits for the step
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    state = {k: v.detach().to("cpu", copy=True) for k, v in net.state_dict().items()}
    return PlainRun(times, losses, state)


def plain_step_times(
    model: str, preset: str, batch_size: int, steps: int, warmup: int, seed: int = 0, device: str = "cpu"
) -> list[float]:
    """Seconds per timed step of the textbook loop."""
    return plain_loop(model, preset, batch_size, steps, warmup, seed, device).step_times_s


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    times = plain_step_times(args.model, args.preset, args.batch_size, args.steps, args.warmup, device=device)
    print(f"median step: {sorted(times)[len(times) // 2] * 1e3:.2f} ms")
