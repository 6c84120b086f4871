"""The DistributedDataParallel script of the PyTorch DDP tutorial, with a clock around each step.

torchrun --nproc-per-node 2 -m bench.experiments.baselines.plain_ddp --model mlp --preset small --steps 20

What a user writes from the tutorial: set up the process group, wrap the model in DDP, give
each rank its slice of the batch, and train; no harness in between.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import models
from models.data import RandomDataset, global_batches


def plain_ddp_step_times(
    model: str, preset: str, batch_size: int, steps: int, warmup: int, seed: int = 0, device: str = "cpu"
) -> list[float]:
    """Seconds per timed step on this rank. The process group must exist (the tutorial's ``setup``)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)
    spec = models.build_model(model, preset)
    net = DDP(spec.blocks.to(device), device_ids=[torch.device(device).index] if device.startswith("cuda") else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    dataset = RandomDataset(spec, 4 * batch_size, seed=seed)
    per_rank = batch_size // world
    times = []
    for step, (inputs, targets) in enumerate(global_batches(dataset, batch_size, warmup + steps)):
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        inputs, targets = inputs[mine].to(device), targets[mine].to(device)
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
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        device = f"cuda:{local_rank}"
    else:
        dist.init_process_group("gloo")
        device = "cpu"
    try:
        times = plain_ddp_step_times(args.model, args.preset, args.batch_size, args.steps, args.warmup, device=device)
        if dist.get_rank() == 0:
            print(f"median step on rank 0: {sorted(times)[len(times) // 2] * 1e3:.2f} ms")
    finally:
        dist.destroy_process_group()
