"""Command-line options made from a config dataclass: each field's docstring is its --help text."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
Config = TypeVar("Config", bound="DataclassInstance")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line gets one line (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field of a dataclass and of the dataclasses it composes (the
    torchtitan style of field docs)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
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
    for f in dataclasses.fields(cls):
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
    names = {f.name for f in dataclasses.fields(cls)} - set(skip)
    return cls(**{k: v for k, v in vars(args).items() if k in names})


def fail(prog: str, message: str) -> NoReturn:
    """The one-line error of every bad input: ``prog: error: message``, exit code 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def config_to_argv(config: DataclassInstance) -> list[str]:
    """The command-line options that rebuild ``config`` exactly (the inverse of ``config_from_args``)."""
    argv: list[str] = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        flag = "--" + f.name.replace("_", "-")
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
