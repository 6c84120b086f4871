"""Model families shared by every strategy, and the loader for a user's own model."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from models import cnn, mlp, rnn, transformer
from models.spec import ModelSpec, TensorParallelPlan

FAMILIES: dict[str, Callable[..., ModelSpec]] = {
    "mlp": mlp.build, "cnn": cnn.build, "rnn": rnn.build, "transformer": transformer.build,
}
PRESETS = ("tiny", "small", "large")
NORMS = cnn.NORMS
NORMED_FAMILIES = frozenset({"cnn"})
"""The families whose ``norm`` changes the model; the others accept it for a uniform signature and ignore it."""


class ModelImportError(ValueError):
    """A ``package.module:function`` model path that cannot be loaded or does not return a ModelSpec."""


def is_import_path(name: str) -> bool:
    """True for ``package.module:function``, the bring-your-own-model form."""
    return ":" in name


def resolve_builder(name: str) -> Callable[..., ModelSpec]:
    """The builder for a family name or an import path, or a one-line error naming the choices."""
    if name in FAMILIES:
        return FAMILIES[name]
    if not is_import_path(name):
        raise ModelImportError(
            f"unknown model {name!r}; choose from {', '.join(FAMILIES)} or give package.module:function"
        )
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code is the user's input error
        raise ModelImportError(f"cannot import {module_name!r} for --model {name}: {exc}") from exc
    builder = getattr(module, attr, None)
    if not callable(builder):
        raise ModelImportError(f"--model {name}: module {module_name!r} has no function {attr!r}")
    return builder


def reads_norm(name: str) -> bool:
    """Whether ``norm`` changes the model ``name`` builds: a family's by NORMED_FAMILIES, a user's builder
    where it declares the argument."""
    if name in FAMILIES:
        return name in NORMED_FAMILIES
    return "norm" in inspect.signature(resolve_builder(name)).parameters


def build_model(name: str, preset: str = "small", norm: str = "batch") -> ModelSpec:
    """Builds a family's model, or calls a user's ``package.module:function``.

    A user's function may take ``preset`` and ``norm`` keyword arguments; those it does not
    declare are not passed.
    """
    builder = resolve_builder(name)
    if name in FAMILIES:
        return builder(preset, norm)
    params = inspect.signature(builder).parameters
    kwargs = {k: v for k, v in (("preset", preset), ("norm", norm)) if k in params}
    try:
        spec = builder(**kwargs)
    except Exception as exc:
        raise ModelImportError(f"--model {name}: the builder raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, ModelSpec):
        raise ModelImportError(f"--model {name} returned {type(spec).__name__}, expected models.ModelSpec")
    return spec


__all__ = ["FAMILIES", "NORMED_FAMILIES", "NORMS", "PRESETS", "ModelImportError", "ModelSpec", "TensorParallelPlan",
           "build_model", "is_import_path", "reads_norm"]
