"""The run's configuration: one frozen dataclass, validated completely before any process starts."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import models
from bench.harness.paths import check_writable
from bench.harness.sections import CheckpointOptions, KnobOptions, MeasureOptions, WorkloadOptions
from strategies import REFERENCE, ConfigError, Launch, Strategy, build_strategy, readers, strategy_class
from strategies.distributed import check_backend, check_per_device_launch, check_sync_batchnorm, default_backend
from strategies.mesh import DIMS
from strategies.options import (
    OPTION_GROUPS,
    BucketOptions,
    DDPOptions,
    FSDPOptions,
    Group,
    MeshOptions,
    ModelFacts,
    PipelineOptions,
    RunOptions,
    SplitOptions,
)
from strategies.precision import check_precision, default_precision

ACCELERATORS = ("auto", "cpu", "cuda")
OPTIMIZERS = ("sgd", "adam")
SCALINGS = ("weak", "strong")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that decides what a run computes and how it is measured, in sections (as torchtitan's
    JobConfig): the strategy, the harness's sections (bench/harness/sections.py) and every strategy
    option group (strategies/options.py), each held under the group's ``key``.

    Each field of a section is one flag of the same name (``config.pipeline.schedule`` is
    ``--schedule``), so the names are unique across sections; records keep the flat ``as_dict()``.
    """

    strategy: str = REFERENCE
    """Parallelism strategy (see `python -m bench list`)."""
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    knobs: KnobOptions = field(default_factory=KnobOptions)
    checkpoint: CheckpointOptions = field(default_factory=CheckpointOptions)
    run: RunOptions = field(default_factory=RunOptions)
    split: SplitOptions = field(default_factory=SplitOptions)
    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    mesh: MeshOptions = field(default_factory=MeshOptions)
    buckets: BucketOptions = field(default_factory=BucketOptions)
    ddp: DDPOptions = field(default_factory=DDPOptions)
    fsdp: FSDPOptions = field(default_factory=FSDPOptions)

    @classmethod
    def from_flags(cls, **values: Any) -> RunConfig:
        """The configuration with these flag values (named as the fields), the rest at their defaults."""
        return cls().with_flags(**values)

    def with_flags(self, **values: Any) -> RunConfig:
        """This configuration with the flags ``values`` changed, each in its own section."""
        unknown = set(values) - set(_SECTION_OF) - {"strategy"}
        if unknown:
            raise TypeError(f"RunConfig has no flag {', '.join(sorted(unknown))}")
        changed: dict[str, Any] = {name: dataclasses.replace(getattr(self, name), **{
            flag: value for flag, value in values.items() if _SECTION_OF.get(flag) == name})
            for name in {_SECTION_OF[flag] for flag in values if flag != "strategy"}}
        if "strategy" in values:
            changed["strategy"] = values["strategy"]
        return dataclasses.replace(self, **changed)

    def as_dict(self) -> dict[str, Any]:
        """Every flag and its value, flat: what records keep under ``config``."""
        flat: dict[str, Any] = {"strategy": self.strategy}
        for name in SECTIONS:
            flat.update(dataclasses.asdict(getattr(self, name)))
        return flat

    def group(self, cls: type[Group]) -> Group:
        """The option group ``cls`` of this configuration, for the strategy that reads it."""
        section: Group = getattr(self, cls.key)
        return section


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(RunConfig)  # type: ignore[misc]
                             if f.default_factory is not dataclasses.MISSING}
"""Each section's attribute of RunConfig and its class, in the order of the flags."""

_SECTION_OF: dict[str, str] = {f.name: name for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
assert len(_SECTION_OF) == sum(len(dataclasses.fields(cls)) for cls in SECTIONS.values()), \
    "a flag named in two sections"


def to_json(config: RunConfig) -> str:
    return json.dumps(config.as_dict())


def from_json(text: str) -> RunConfig:
    return RunConfig.from_flags(**json.loads(text))


RTOL, ATOL = 1e-4, 1e-5
"""fp32 tolerance of every equivalence check (bench verify, the tests): sharded batches and reduced
gradients sum in another order, a few ulps per step."""


def checked_microbatches(strategy: str) -> int:
    """Micro-batches an equivalence check or a benchmark case runs ``strategy`` with: 4 where it
    splits the batch (so that the micro-batching is exercised), else 1."""
    return 4 if SplitOptions in strategy_class(strategy).reads else 1


def unread_groups_reset(config: RunConfig) -> RunConfig:
    """``config`` with every option group its strategy does not read back at its defaults: what a
    sweep hands each strategy of its grid, so that --bucket-cap-mb reaches ddp and spares mp."""
    reads = (RunOptions, *strategy_class(config.strategy).reads)
    defaults: dict[str, Any] = {group.key: group() for group in OPTION_GROUPS if group not in reads}
    return dataclasses.replace(config, **defaults)


def gpus_available() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_device_counts(accelerator: str) -> tuple[int, ...]:
    """1, 2, 4, 8 ... up to the GPUs present; on the CPU up to the cores (at most 4), emulated."""
    limit = max(gpus_available() if accelerator == "cuda" else min(os.cpu_count() or 1, 4), 1)
    return tuple(2**k for k in range(limit.bit_length()))  # the powers of two up to limit


def resolve(config: RunConfig) -> RunConfig:
    """Validates ``config`` and fills in the defaults that depend on the machine or the model.

    Raises ConfigError with one line naming the numbers or the valid choices. Nothing here
    starts a process or writes a file, so a bad command line leaves no trace.
    """
    _check_choices(config)
    _check_numbers(config)
    cls = strategy_class(config.strategy)
    _check_groups(config, cls)
    gpus = gpus_available()
    accelerator = config.run.accelerator
    if accelerator == "auto":
        accelerator = "cuda" if gpus else "cpu"
    if accelerator == "cuda" and gpus == 0:
        raise ConfigError("--accelerator cuda asked for, but torch sees no CUDA device on this machine")
    facts = _model_facts(config)
    batch_size = config.run.batch_size or facts.default_batch_size
    check_backend(config.run.backend, accelerator)
    backend = default_backend(accelerator) if config.run.backend == "auto" else config.run.backend
    check_precision(config.run.precision, accelerator)
    precision = default_precision(accelerator) if config.run.precision == "auto" else config.run.precision
    channels_last = _channels_last(config, accelerator, facts.image_inputs)
    resolved = config.with_flags(accelerator=accelerator, batch_size=batch_size, backend=backend,
                                 precision=precision, channels_last=channels_last)
    if config.knobs.deterministic and accelerator == "cuda" and (layers := ", ".join(facts.nondeterministic_on_cuda)):
        raise ConfigError(f"--deterministic on CUDA: model {config.workload.model!r} has {layers}, whose CUDA "
                          "backward has no deterministic kernel (torch would raise at the first step); "
                          "drop --deterministic")
    if config.knobs.compile and cls.compile_refusal:
        raise ConfigError(f"--compile: strategy {config.strategy!r} cannot compile: {cls.compile_refusal}")
    if precision == "fp16" and cls.fp16_refusal:
        raise ConfigError(f"--precision fp16 {cls.fp16_refusal}")
    if cls.launch is Launch.PER_DEVICE:
        # Counted per node: under a many-node torchrun, --devices is the world, not this machine.
        check_per_device_launch(resolved.run.devices, accelerator, gpus)
    elif accelerator == "cuda" and resolved.run.devices > gpus:
        raise ConfigError(f"--devices {resolved.run.devices} asked for, but this machine has {gpus} GPU(s)")
    check_sync_batchnorm(config.ddp.sync_batchnorm, config.workload.model, resolved.run.devices, facts.layer_types)
    build_strategy(config.strategy, resolved).validate(
        ModelFacts(blocks=facts.blocks, gpus=gpus, tp_plan=facts.tp_plan, layer_types=facts.layer_types))
    for path, flag in ((config.measure.out, "--out"), (config.measure.profile and Path(config.measure.profile) / "x",
                                                       "--profile"),
                       (config.checkpoint.save_checkpoint, "--save-checkpoint")):
        if path:
            check_writable(Path(path), flag)
    if config.checkpoint.load_checkpoint:
        _check_checkpoint(resolved)
    return resolved


def _check_groups(config: RunConfig, cls: type[Strategy]) -> None:
    """Refuses a flag of an option group the strategy does not read, naming the strategies that do."""
    for group in OPTION_GROUPS:
        if group is RunOptions or group in cls.reads:
            continue
        section = config.group(group)
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            if value != f.default:
                flag = "--" + f.name.replace("_", "-") + ("" if isinstance(value, bool) else f" {value}")
                raise ConfigError(f"{flag} is for {', '.join(readers(group))}, not {config.strategy}")


def _check_choices(config: RunConfig) -> None:
    if config.workload.preset not in models.PRESETS:
        raise ConfigError(f"unknown preset {config.workload.preset!r}; choose from {', '.join(models.PRESETS)}")
    if config.workload.norm not in models.NORMS:
        raise ConfigError(f"unknown norm {config.workload.norm!r}; choose from {', '.join(models.NORMS)}")
    if config.run.accelerator not in ACCELERATORS:
        raise ConfigError(f"unknown accelerator {config.run.accelerator!r}; choose from {', '.join(ACCELERATORS)}")
    if config.measure.scaling not in (None, *SCALINGS):
        raise ConfigError(f"unknown scaling {config.measure.scaling!r}; choose from {', '.join(SCALINGS)}")
    if config.workload.optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {config.workload.optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
    try:
        models.resolve_builder(config.workload.model)
    except models.ModelImportError as exc:
        raise ConfigError(str(exc)) from None


def _check_numbers(config: RunConfig) -> None:
    flags = config.as_dict()
    for name in ("devices", "steps", "batch_size", "microbatches", "stages_per_rank", *DIMS):
        value = flags[name]
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    for name in ("warmup", "max_restarts", "repeat"):
        if flags[name] < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be 0 or more, got {flags[name]}")
    for name in ("lr", "timeout_s", "bucket_cap_mb", "peak_tflops"):
        value = flags[name]
        if value is not None and not value > 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}")


@dataclass(frozen=True)
class BuiltModelFacts:
    """What validation needs to know of the model, from one build on the meta device."""

    default_batch_size: int
    image_inputs: bool
    """Inputs are 4-D (N, C, H, W): the channels-last format applies."""
    blocks: int
    tp_plan: models.TensorParallelPlan | None = None
    layer_types: tuple[str, ...] = ()
    """Classes of the layers with parameters that are not nn.Linear."""
    nondeterministic_on_cuda: tuple[str, ...] = ()
    """Classes of the model's modules that ``torch.use_deterministic_algorithms`` refuses on CUDA."""


# The modules of torch's list of kernels that raise on CUDA under use_deterministic_algorithms(True) (its
# docstring). A functional call (a bilinear interpolate) is not a module and still fails at the first step.
NONDETERMINISTIC_ON_CUDA = tuple(getattr(torch.nn, name) for name in (
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool2d", "AvgPool3d", "FractionalMaxPool2d",
    "FractionalMaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "ReflectionPad1d", "ReflectionPad2d",
    "ReflectionPad3d", "CTCLoss"))


def _model_facts(config: RunConfig) -> BuiltModelFacts:
    return _facts_of(config.workload.model, config.workload.preset, config.workload.norm)


@functools.lru_cache(maxsize=64)
def _facts_of(model: str, preset: str, norm: str) -> BuiltModelFacts:
    # Built on the meta device: no memory, no arithmetic, and a user's model that fails to
    # build fails here, before any process starts. Once per model a process: bench plan resolves
    # thousands of configurations of one model, and a large preset takes ~25 ms to build even so.
    try:
        with torch.device("meta"):
            spec = models.build_model(model, preset, norm)
    except models.ModelImportError as exc:
        raise ConfigError(str(exc)) from None
    inputs, _ = spec.make_batch(1, torch.Generator().manual_seed(0))
    layer_types = sorted({type(m).__name__ for m in spec.blocks.modules()
                          if not isinstance(m, torch.nn.Linear) and any(True for _ in m.parameters(recurse=False))})
    nondeterministic = sorted({type(m).__name__ for m in [*spec.blocks.modules(), spec.loss_fn]
                               if isinstance(m, NONDETERMINISTIC_ON_CUDA)})
    return BuiltModelFacts(spec.default_batch_size, inputs.dim() == 4, len(spec.blocks), spec.tp_plan,
                           tuple(layer_types), tuple(nondeterministic))


def _channels_last(config: RunConfig, accelerator: str, image_inputs: bool) -> bool:
    """Channels-last where it pays: image models on GPUs (tensor-core convolutions want NHWC)."""
    if config.knobs.channels_last is None:
        return image_inputs and accelerator == "cuda"
    if config.knobs.channels_last and not image_inputs:
        raise ConfigError("--channels-last applies to 4-D image inputs (the cnn); "
                          f"model {config.workload.model!r} has none")
    return config.knobs.channels_last


def _check_checkpoint(config: RunConfig) -> None:
    from bench.harness.checkpoint import CheckpointError, load_checkpoint

    with torch.device("meta"):
        name = models.build_model(config.workload.model, config.workload.preset, config.workload.norm).name
    try:
        load_checkpoint(str(config.checkpoint.load_checkpoint), name, config.workload.preset)
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
