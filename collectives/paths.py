"""Can a program write its output here? Asked before the work, so that a run never fails at its end.

``unwritable(path)`` makes ``path``'s folders and returns what stops a file being written there, in words (None
if nothing does): a folder given as a file, a folder that cannot be made or written, a read-only file, a device
that takes nothing (``/dev/full``). The benchmarks' ``--plot``/``--json`` and the trainer's ``--save``,
``--log-json`` and ``--timeline`` say it in one line, before their first message or step.
"""

from __future__ import annotations

import os
import sys


def unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written (its folders made first), or None."""
    if os.path.isdir(path):
        return "is a folder; give a file name in it"
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        return f"cannot make the folder {folder} ({e.strerror})"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file exists and is not writable"
    if os.path.exists(path) and not os.path.isfile(path):  # a device: /dev/full takes nothing, /dev/null anything
        try:
            with open(path, "ab", buffering=0) as f:
                f.write(b"\n")
        except OSError as e:
            return f"cannot be written ({e.strerror})"
    return None


def check_output(flag: str, path: str | None, prog: str) -> None:
    """A program's output ``flag PATH`` before its work: folders made, or one line and exit 2."""
    problem = None if path is None else unwritable(path)
    if problem is not None:
        print(f"{prog}: error: {flag} {path}: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(2)
