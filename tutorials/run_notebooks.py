"""Turn every tutorial into a notebook and execute it: ``make notebooks``.

Each ``tutorials/NN_topic.py`` (Jupytext "percent" format) becomes ``tutorials/notebooks/NN_topic.ipynb``
(git-ignored), executed top to bottom by nbclient in quick mode (``MINIDL_QUICK=1``) with the outputs
and inline figures saved in the notebook. Open them with ``jupyter lab tutorials/notebooks``.

    python tutorials/run_notebooks.py [NAME ...]   # default: every tutorial
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jupytext
import nbclient
from jupyter_client.manager import AsyncKernelManager

HERE = Path(sys.argv[0]).resolve().parent if sys.argv[0] else Path.cwd() / "tutorials"
TIMEOUT_S = 900  # one cell; quick mode takes seconds, a full run minutes


def execute(script: Path, out_dir: Path) -> float:
    """Convert ``script`` to a notebook, execute it in a fresh kernel, save it; returns seconds taken."""
    notebook = jupytext.read(script)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    os.environ["MINIDL_QUICK"] = os.environ.get("MINIDL_QUICK", "1")
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend draws the figures into the notebook
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="minidl-kernel-") as sockets:
        client = nbclient.NotebookClient(
            notebook,
            timeout=TIMEOUT_S,
            kernel_name="python3",
            kernel_manager_class=ipc_kernel_manager(sockets),
            resources={"metadata": {"path": str(HERE.parent)}},
        )
        try:
            client.execute()
        finally:
            jupytext.write(notebook, out_dir / f"{script.stem}.ipynb")
    return time.perf_counter() - start


def ipc_kernel_manager(directory: str) -> type[AsyncKernelManager]:
    """A kernel manager whose kernel talks over Unix sockets in ``directory``: a kernel on TCP (jupyter_client's
    default) warns "Kernel is running over TCP without encryption" once per notebook, nine times a ``make docs``."""

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(transport="ipc", ip=os.path.join(directory, "kernel"), **kwargs)

    return IPCKernelManager


def main(names: list[str]) -> int:
    out_dir = HERE / "notebooks"
    out_dir.mkdir(exist_ok=True)
    scripts = sorted(HERE.glob("[0-9][0-9]_*.py"))
    if names:
        scripts = [s for s in scripts if any(s.name.startswith(n) for n in names)]
    failed = []
    for script in scripts:
        try:
            print(f"== {script.name} as a notebook: {execute(script, out_dir):.1f} s", flush=True)
        except nbclient.exceptions.CellExecutionError as err:
            failed.append(script.name)
            print(f"== {script.name} as a notebook FAILED:\n{str(err)[-3000:]}", flush=True)
    print(f"{len(scripts) - len(failed)} notebooks executed, {len(failed)} failed -> {out_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
