"""The plain single-device training loop of the PyTorch tutorials, with a clock around each step.

python -m bench.baselines.plain_loop --model cnn --preset small --steps 20
"""

from __future__ import annotations

import argparse
import time

import torch

import models
from models.data import RandomDataset, global_batches


def plain_step_times(
    model: str, preset: str, batch_size: int, steps: int, warmup: int, seed: int = 0, device: str = "cpu"
) -> list[float]:
    """Seconds per timed step of the textbook loop: zero_grad, forward, loss, backward, step."""
    torch.manual_seed(seed)
    spec = models.build_model(model, preset)
    net = spec.blocks.to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    dataset = RandomDataset(spec, 4 * batch_size, seed=seed)
    times = []
    for step, (inputs, targets) in enumerate(global_batches(dataset, batch_size, warmup + steps)):
        inputs, targets = inputs.to(device), targets.to(device)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = spec.loss_fn(net(inputs), targets)
        loss.backward()
        optimizer.step()
        loss.item()  # the tutorials print the loss; reading it waits for the step
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return times


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
