"""What the tutorials share, so that each runs the same as a script and as a Jupyter notebook.

A tutorial is a Jupytext "percent" script: ``python tutorials/05_data_parallel.py`` runs it, and
``make notebooks`` turns it into ``tutorials/notebooks/05_data_parallel.ipynb`` and executes it. Three
things differ between the two, and this module hides them:

- quick mode: ``--quick`` on the command line, or ``MINIDL_QUICK=1`` (how a notebook is told);
- figures: a script saves them under ``tutorials/out/`` (or ``$MINIDL_TUTORIAL_OUT``); a notebook shows
  them inline and saves them too;
- ranks: a lesson that needs P MPI ranks cannot run inside one notebook kernel. ``need_ranks`` runs the
  whole lesson under ``mpiexec -n P`` from the notebook and shows what rank 0 printed, instead of
  computing numbers on one rank that would mean nothing.

Nothing here uses a tutorial's ``__file__`` (a notebook has none).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from minidl.measure import busy_note, interleaved, spread  # noqa: F401  (re-exported for the tutorials)

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"


def quick() -> bool:
    """True for a seconds-long run: ``--quick`` on the command line or ``MINIDL_QUICK=1``."""
    return "--quick" in sys.argv or os.environ.get("MINIDL_QUICK") == "1"


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython with a kernel attached), False in a plain script."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    ip = shell.get_ipython()  # type: ignore[attr-defined]
    return ip is not None and getattr(ip, "kernel", None) is not None


def out_dir() -> Path:
    """Where figures are saved: ``$MINIDL_TUTORIAL_OUT``, else ``tutorials/out`` beside the tutorials."""
    env = os.environ.get("MINIDL_TUTORIAL_OUT")
    path = Path(env) if env else (TUTORIALS / "out" if TUTORIALS.is_dir() else Path.cwd() / "tutorial_out")
    path.mkdir(parents=True, exist_ok=True)
    return path


def show(fig: Any, name: str, **savefig: Any) -> Path:
    """Save ``fig`` as ``out_dir()/name``; in a notebook also display it inline. Returns the path."""
    path = out_dir() / name
    fig.savefig(path, **({"dpi": 100, "bbox_inches": "tight"} | savefig))
    show_file(path)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def show_file(path: Path) -> Path:
    """A picture already written (a PNG or SVG, e.g. by ``minidl.viz.graph``): shown inline in a notebook,
    named in a script. Returns the path."""
    if in_notebook():  # as a file, whatever matplotlib backend the kernel runs
        from IPython.display import SVG, Image, display

        display(SVG(filename=str(path)) if Path(path).suffix == ".svg" else Image(filename=str(path)))
    else:
        print("saved", path)
    return Path(path)


def mpiexec() -> str | None:
    """The mpiexec beside this Python (the ``mpich`` wheel in .venv), else the one on PATH, else None."""
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def need_ranks(n: int, script: str, comm_size: int) -> bool:
    """Make sure a lesson for ``n`` ranks runs on ranks. Returns True when the caller is on ranks.

    ``script`` is the tutorial's file name (``"05_data_parallel.py"``), ``comm_size`` the number of ranks
    it was started with. Under ``mpiexec -n P`` (P >= 2) this returns True and the lesson goes on. In a
    notebook it runs ``mpiexec -n n python tutorials/<script> [--quick]`` as a subprocess, shows rank 0's
    output here, and makes the notebook's remaining cells no-ops (they have just run on the ranks).
    From a plain one-process ``python`` run it exits with the command to type.
    """
    if comm_size >= 2:
        return True
    command = f"mpiexec -n {n} python tutorials/{script}"
    launcher, path = mpiexec(), TUTORIALS / script
    if not in_notebook():
        raise SystemExit(f"this lesson needs ranks: run `{command}` (add --quick for a seconds-long run)")
    if launcher is None or not path.is_file():
        print(f"This lesson needs {n} MPI ranks and no mpiexec (or tutorials/{script}) was found here.")
        print(f"Run it from a shell: {command}")
    else:
        args = [launcher, "-n", str(n), sys.executable, str(path)] + (["--quick"] if quick() else [])
        print(f"$ {command}{' --quick' if quick() else ''}   (the lesson runs on {n} ranks; rank 0 prints)\n")
        env = dict(os.environ, MPLBACKEND="Agg")
        done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=TUTORIALS.parent)
        print(done.stdout, end="")
        if done.returncode != 0:
            raise RuntimeError(f"`{command}` failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        print(f"\n(figures saved under {out_dir()})")
    _skip_remaining_cells()
    return False


def _skip_remaining_cells() -> None:
    """Turn every later cell of this notebook into a no-op (their work ran under mpiexec above)."""
    import IPython

    ip = IPython.get_ipython()  # type: ignore[attr-defined]
    if ip is not None:
        ip.input_transformers_post.append(lambda lines: ["pass  # ran under mpiexec above\n"])
