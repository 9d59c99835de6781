"""How the suite's records and commands name where they came from, in words a stranger can
read: the checkout (`REPO`), paths relative to it or to the sweep's output root
(`public_path`, `relative_path`) and the command to type again (`command_line`). Here, in the
lowest room that writes records, because the sweep (experiments/sweep.py) and the analysis both
write provenance lines and must write them alike; the analysis imports them from here."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

#: The suite's checkout: the folder that holds run.py.
REPO = Path(__file__).resolve().parents[2]


def command_line(
    args: Sequence[str],
    out_root: str | os.PathLike | None = None,
    module: str = "analysis.reports.report",
) -> str:
    """How to type this command again, from the checkout's root: `python -m <module> <args>`,
    every path in it as `public_path` gives it."""
    shown = []
    for arg in args:
        option, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        shown.append(f"{option}{eq}{public_path(value, out_root)}" if eq or not option else arg)
    return shlex.join(["python", "-m", module, *shown])


def public_path(text: str | os.PathLike, out_root: str | os.PathLike | None = None) -> str:
    """`text` as a path a stranger can read: relative to the checkout when inside it, `$OUT/...`
    inside `out_root` (the sweep's output root), and `text` itself when it is no absolute path.
    An absolute path elsewhere is named by its last two components under `$OUT` too: the
    machine's folders are nobody else's."""
    text = os.fspath(text)
    if not os.path.isabs(text):
        return text
    path = Path(os.path.normpath(text))
    if path == REPO or REPO in path.parents:
        return str(path.relative_to(REPO)) or "."
    if out_root is not None:
        root = Path(os.path.normpath(os.fspath(out_root)))
        if path == root:
            return "$OUT"
        if root in path.parents:
            return f"$OUT/{path.relative_to(root)}"
    return "$OUT/" + "/".join(path.parts[-2:])


def relative_path(path: str | os.PathLike, base: str | os.PathLike = REPO) -> str:
    """`path` relative to `base` when inside it, else as given (for what the CLIs print)."""
    try:
        return str(Path(path).resolve().relative_to(Path(base).resolve()))
    except ValueError:
        return os.fspath(path)
