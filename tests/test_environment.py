"""bench/harness/environment.py: the environment block of every record."""

from __future__ import annotations

from bench.harness.environment import plain_text


def test_the_topology_keeps_nvidia_smis_table_without_its_escape_codes() -> None:
    # As `nvidia-smi topo -m` printed into a pipe on the H200 (reports/gpu-h200-1x-2026-12-04/environment.json).
    printed = "\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-15\t0\t\tN/A\n"
    assert plain_text(printed) == "GPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A"
