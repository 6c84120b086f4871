"""The live process tree, read from /proc: which processes a test's command left behind."""

from __future__ import annotations

from pathlib import Path


def live() -> dict[int, tuple[int, str]]:
    """Each live process (zombies do not count): its parent and its command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            state, parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z":
            found[int(proc.name)] = (int(parent), command)
    return found


def descendants(pid: int) -> dict[int, str]:
    """The live Python processes below ``pid``, by pid: their command lines."""
    now = live()
    found: dict[int, str] = {}
    grew = True
    while grew:
        below = {p: c for p, (parent, c) in now.items() if (parent == pid or parent in found) and "python" in c}
        grew = len(below) > len(found)
        found = below
    return found
