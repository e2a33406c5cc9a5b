"""Ctrl-C in tests: start a command (under mpiexec or alone), send it SIGINT once it prints a given text, and
return its exit status and output; every wait is bounded, and a command left running is killed with its group."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def interrupt(command: list[str], cwd: Path, after: str, timeout: float = 120) -> tuple[int, str]:
    """Start ``command``, send SIGINT once a line containing ``after`` is printed; its status and its output."""
    proc = subprocess.Popen(
        command, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines, deadline = [], time.monotonic() + timeout
    try:
        while after not in "".join(lines) and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
            line = proc.stdout.readline() if ready else ""
            if not line and (not ready or proc.poll() is not None):
                break
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            return -1, "".join(lines) + f"\n(still running {timeout} s after it started: killed)"
        return proc.returncode, "".join(lines) + out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
