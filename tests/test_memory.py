"""minidl.memory: ``import minidl`` fixes glibc's malloc thresholds, so freed arrays stay mapped for the next step."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from minidl.tools import memory

pytestmark = pytest.mark.skipif(not memory.glibc(), reason="glibc's mallopt only")

# Three 24 MiB arrays, touched, then freed, three times: the resident set after each free, in MiB above the start.
PROGRAM = """
import numpy as np
import minidl, minidl.tools.memory as m
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20
base = rss()
kept = []
for _ in range(3):
    arrays = [np.ones(6 << 20, dtype=np.float32) for _ in range(3)]
    del arrays
    kept.append(rss() - base)
print(m.malloc_tuned(), min(kept))
"""


def run(env_extra: dict[str, str]) -> tuple[bool, float]:
    env = {k: v for k, v in os.environ.items() if k not in memory.USER_VARIABLES and k != "MINIDL_MALLOC"}
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], env={**env, **env_extra}, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", float(out[1])


def test_import_keeps_freed_arrays_mapped():
    tuned, kept = run({})
    assert tuned
    assert kept >= 60, f"only {kept:.0f} of 72 MiB freed stayed mapped: the trim threshold is not in effect"


@pytest.mark.parametrize(
    "env",
    [
        {"MINIDL_MALLOC": "default"},
        {"MALLOC_TRIM_THRESHOLD_": str(1 << 20)},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"},
    ],
)
def test_user_settings_win(env):
    """MINIDL_MALLOC=default or the user's own malloc settings: minidl leaves the allocator alone, and with
    glibc's defaults (or a small trim threshold) the freed arrays go back to the system."""
    tuned, kept = run(env)
    assert not tuned
    assert kept < 60
