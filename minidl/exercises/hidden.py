"""The hidden tier of ``check NAME --submit``: inputs made from fixed seeds, outputs compared by hash.

For each exercise, ``Exercise.digest(module, seed)`` runs the student's code on an input made from
``seed`` (other sizes and values than the visible checks use) and returns the canonical text of the
output (``core.canonical``: floats to 8 significant digits, integers exactly). Only the SHA-256 of the
reference solution's text is stored (hashes.py), never the expected values, so a solution tuned to the
visible cases is found out without the answer being in the repository. tests/test_exercises.py
regenerates the hashes from the reference solutions and compares them with the stored ones.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from minidl.exercises.core import Broke, sha256
from minidl.exercises.hashes import HIDDEN

if TYPE_CHECKING:
    from minidl.exercises.core import Exercise

SEEDS = (20261125, 31337, 4242)


def hidden_text(ex: Exercise, module: ModuleType, seed: int) -> str:
    return ex.digest(module, seed)


def check_hidden(ex: Exercise, module: ModuleType) -> None:
    """Raise Broke at the first hidden case whose output's hash differs from the stored one."""
    stored = HIDDEN.get(ex.name)
    if stored is None or len(stored) != len(SEEDS):
        raise RuntimeError(f"exercises: no hidden hashes for {ex.name}; run `python -m minidl.exercises hashes`")
    for k, (seed, want) in enumerate(zip(SEEDS, stored), start=1):
        if sha256(hidden_text(ex, module, seed)) != want:
            raise Broke(
                "hidden output",
                f"hidden case {k} of {len(SEEDS)} (made from seed {seed})",
                "the output differs from the expected one (only its SHA-256 is stored): the visible checks pass,\n"
                "so look for a case they do not cover (the docstring's math, sizes, values)",
            )
