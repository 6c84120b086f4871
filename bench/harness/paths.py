"""Where a command will write, checked before it measures anything: one rule for run, sweep, verify's rows,
calibrate, predict, plan and report, so that every one refuses alike and in one line."""

from __future__ import annotations

import tempfile
from pathlib import Path

from strategies import ConfigError


def writable_folder(folder: Path) -> Path:
    """The nearest existing folder at or above ``folder`` (the one a missing path would be made in), once it is
    shown writable; ConfigError naming it otherwise. Permission bits say nothing to root, nor of a read-only or
    pseudo file system (/proc, /sys): a file is made and removed there instead."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise OSError
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError:
        raise ConfigError(f"cannot write in {existing}") from None
    return existing


def check_writable(path: Path, flag: str = "--out") -> None:
    """ConfigError, before anything is written, where ``path`` cannot be appended to: its folder cannot take a
    file, or it is a folder or a file that cannot be opened for appending (opening it changes nothing)."""
    try:
        writable_folder(path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {path}: {exc}") from None
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder, not a file")
    if path.exists():
        try:
            with path.open("ab"):
                pass
        except OSError:
            raise ConfigError(f"{flag} {path}: not a writable file") from None
