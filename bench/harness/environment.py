"""The environment block of every record: enough to tell two machines' numbers apart."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from bench.harness.allocator import allocator


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _nccl_version() -> str | None:
    if not torch.cuda.is_available():
        return None
    try:
        return ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception:  # torch built without NCCL
        return None


def _gpu_topology() -> str | None:
    """``nvidia-smi topo -m``: which GPU pairs talk over NVLink, PCIe switches or the CPU."""
    if not torch.cuda.is_available() or shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return plain_text(out.stdout) or None if out.returncode == 0 else None


def plain_text(terminal_output: str) -> str:
    """``terminal_output`` without its escape sequences: nvidia-smi underlines its header even into a pipe,
    and the report would show the codes."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", terminal_output).strip()


def environment() -> dict[str, Any]:
    """Versions, devices and code revision of this machine, as recorded with every run."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain") if commit else None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": _nccl_version(),
        "gpu_names": gpus,
        "gpu_count": len(gpus),
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "allocator": allocator(),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "git_commit": commit,
        "git_dirty": bool(status) if commit else None,
        "topology": _gpu_topology(),
        "device_memory_bytes": _device_memory_bytes(),
    }


def _device_memory_bytes() -> int | None:
    """One GPU's memory, or on a CPU the host's (which emulated devices share)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
