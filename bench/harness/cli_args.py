"""Command-line options made from a config dataclass: each field's docstring is its --help text."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
Config = TypeVar("Config", bound="DataclassInstance")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line gets one line (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, except None: the help says what None stands for."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def section_class(f: dataclasses.Field) -> type | None:
    """The dataclass a field holds as a section of its config (a field made by such a class), else None."""
    factory = f.default_factory
    return factory if isinstance(factory, type) and dataclasses.is_dataclass(factory) else None


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are flags: its own, and those of its sections, in order."""
    found: list[dataclasses.Field] = []
    for f in dataclasses.fields(cls):
        section = section_class(f)
        found += flag_fields(section) if section else [f]
    return found


def flag_values(config: DataclassInstance) -> dict[str, Any]:
    """Each flag of ``config`` and its value, sections flattened."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        values.update(flag_values(value) if section_class(f) else {f.name: value})
    return values


def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field of a dataclass, of the dataclasses it inherits and of its
    sections (the torchtitan style of field docs)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    for f in dataclasses.fields(cls):
        if section := section_class(f):
            docs.update(field_docs(section))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    (definition,) = [node for node in ast.parse(inspect.getsource(cls)).body if isinstance(node, ast.ClassDef)]
    body = definition.body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = after.value.value
    return docs


_TYPES = {"int": int, "float": float, "str": str, "int | None": int, "float | None": float, "str | None": str}


def add_config_arguments(
    parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (), defaults: dict | None = None
) -> None:
    """One ``--field-name`` option per dataclass field, typed and documented from the class;
    ``defaults`` replaces the class's default of some fields for this command."""
    docs = field_docs(cls)
    defaults = defaults or {}
    for f in flag_fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_text = docs.get(f.name, "")
        if f.type in ("bool", "bool | None"):  # None: decided per machine and model in bench.harness.config.resolve
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
            continue
        default = defaults.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
        shown = "" if default is None else f" (default: {default})"
        parser.add_argument(flag, type=_TYPES[str(f.type)], default=default, help=help_text + shown)


def config_from_args(cls: type[Config], args: argparse.Namespace, skip: tuple[str, ...] = ()) -> Config:
    """``cls`` (its sections too) from the flags ``add_config_arguments`` added; skipped ones at their defaults."""
    given = {k: v for k, v in vars(args).items() if k not in skip}
    return _built(cls, given)


def _built(cls: type[Config], values: dict[str, Any]) -> Config:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if section := section_class(f):
            kwargs[f.name] = _built(section, values)
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


def fail(prog: str, message: str) -> NoReturn:
    """The one-line error of every bad input: ``prog: error: message``, exit code 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def config_to_argv(config: DataclassInstance) -> list[str]:
    """The command-line options that rebuild ``config`` exactly (the inverse of ``config_from_args``)."""
    argv: list[str] = []
    for name, value in flag_values(config).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def comma_list(kind: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """An argparse type for ``1,2,4`` style lists."""

    def parse(text: str) -> tuple:
        try:
            return tuple(kind(item) for item in text.split(",") if item.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {getattr(kind, '__name__', 'values')}, got {text!r}"
            ) from None

    parse.__name__ = f"{getattr(kind, '__name__', 'value')} list"
    return parse
