"""Ctrl-C in tests: start a command (under mpiexec or alone), send it SIGINT once it prints a given text, and
return its exit status and output; every wait is bounded, and a command left running is killed with its group."""

from __future__ import annotations

import os
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
        for line in proc.stdout:
            lines.append(line)
            if after in line:
                break
        proc.send_signal(signal.SIGINT)
        lines.append(proc.stdout.read())
        return proc.wait(timeout=max(deadline - time.monotonic(), 1)), "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
