"""Run labels: the short names that tell runs apart in a sweep's progress and in the report.

Both ``bench`` and ``reports`` label runs; this is the one module that says how."""

from __future__ import annotations

import re
from typing import Any

from strategies import STRATEGIES
from strategies.mesh import DIMS
from strategies.options import FSDPOptions, MeshOptions, PipelineOptions, SplitOptions
from strategies.precision import default_precision

VERIFIED_CLASS = ("norm", "schedule", "microbatches", "precision", *DIMS)
"""Beside strategy and model, what a ``bench verify`` verdict covers: a run differing in any of these was not
checked by it (the mesh's degrees resolved for a strategy that reads them, None for the others)."""


def variant(config: dict[str, Any]) -> str:
    """A strategy with the options that set its sweep points apart: ``pp (1f1b, m=8)``, ``mp (m=4)``
    (the report's "variant" column)."""
    name = str(config["strategy"])
    reads = STRATEGIES[name].reads if name in STRATEGIES else ()
    shown = []
    if MeshOptions in reads:  # hybrid's degrees as given: dp-shard=2, tp=2
        shown += [f"{k.replace('_', '-')}={config[k]}" for k in DIMS if config.get(k)]
    # A mesh without a pipeline (pp=1) has no schedule or micro-batches to tell its runs apart by.
    piped = not (MeshOptions in reads and config.get("pp") == 1)
    if PipelineOptions in reads and piped:
        shown.append(str(config.get("schedule")))
    if SplitOptions in reads and piped:
        shown.append(f"m={config.get('microbatches')}")
    if PipelineOptions in reads and piped and config.get("stages_per_rank", 1) != 1:
        shown.append(f"v={config['stages_per_rank']}")
    if FSDPOptions in reads:
        shown.append("ZeRO-3" if config.get("reshard_after_forward", True) else "ZeRO-2")
    if SplitOptions in reads and config.get("balance", "even") != "even":
        shown.append(f"balance={config['balance']}")
    shown += knob_labels(config)
    return f"{name} ({', '.join(shown)})" if shown else name


def knob_labels(config: dict[str, Any]) -> list[str]:
    """The training knobs a run used beyond its machine's defaults: ``bf16`` on a CPU, ``compiled``."""
    cuda = config.get("accelerator") == "cuda"
    labels = []
    if config.get("precision") not in (None, "auto", default_precision("cuda" if cuda else "cpu")):
        labels.append(str(config["precision"]))
    if config.get("channels_last") is True and not cuda:
        labels.append("channels-last")
    if config.get("channels_last") is False and cuda and config.get("model") == "cnn":
        labels.append("NCHW")
    labels += [label for key, label in (("compile", "compiled"), ("activation_checkpointing", "ckpt"))
               if config.get(key)]
    return labels


def run_label(config: dict[str, Any]) -> str:
    """A whole configuration in a few words, for progress lines and log names:
    ``pp (gpipe, m=4) mlp x2 b64 #2`` (batch 64, the second repeat)."""
    repeat = int(config.get("repeat") or 0) + 1
    return f"{variant(config)} {config['model']} x{config['devices']} b{config['batch_size']} #{repeat}"


def file_name(label: str) -> str:
    """``label`` as a file or folder name: ``pp_gpipe_m=4_mlp_x2_b64_1``."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", label).strip("_")
