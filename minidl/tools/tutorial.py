"""What the tutorials share, so that each runs the same as a script and as a Jupyter notebook.

A tutorial is a Jupytext "percent" script: ``python tutorials/05_data_parallel.py`` runs it, and
``make notebooks`` turns it into ``tutorials/notebooks/05_data_parallel.ipynb`` and executes it. Three
things differ between the two, and this module hides them:

- quick mode: ``--quick`` on the command line, or ``MINIDL_QUICK=1`` (how a notebook is told);
- figures: a script saves them under ``tutorials/out/`` (or ``$MINIDL_TUTORIAL_OUT``); a notebook shows
  them inline and saves them too;
- ranks: a lesson that needs P MPI ranks cannot run inside one notebook kernel. ``need_ranks`` runs the
  whole lesson under ``mpiexec -n P`` from the notebook (rank 0 marks where each code cell begins), and
  each later cell of the notebook shows what rank 0 printed in that cell, its figures inline, instead of
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

from minidl.tools.measure import busy_note, interleaved, spread  # noqa: F401  (re-exported for the tutorials)

TUTORIALS = Path(__file__).resolve().parents[2] / "tutorials"  # minidl/tools/tutorial.py -> the repository


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


def show(fig: Any, name: str, **savefig: Any) -> None:
    """Save ``fig`` as ``out_dir()/name``; in a notebook also display it inline. Returns nothing: a cell that ends
    with it shows the figure, not an ``Out[n]: PosixPath(...)`` line."""
    path = out_dir() / name
    fig.savefig(path, **({"dpi": 100, "bbox_inches": "tight"} | savefig))
    show_file(path)
    import matplotlib.pyplot as plt

    plt.close(fig)


def quick_note(ax: Any, text: str) -> None:
    """In quick mode, write on the plot what its seconds-long run cannot show (nothing otherwise)."""
    if quick():
        ax.text(
            0.5,
            0.04,
            f"quick mode: {text}",
            transform=ax.transAxes,
            ha="center",
            va="bottom",
            fontsize=7,
            color="dimgray",
            wrap=True,
            bbox={"facecolor": "white", "edgecolor": "lightgray", "alpha": 0.9},
        )


def show_file(path: Path) -> None:
    """A picture already written (a PNG or SVG, e.g. by ``minidl.tools.viz.graph``): shown inline in a notebook,
    named in a script. Returns nothing (as ``show``)."""
    if in_notebook():  # as a file, whatever matplotlib backend the kernel runs
        from IPython.display import SVG, Image, display

        display(SVG(filename=str(path)) if Path(path).suffix == ".svg" else Image(filename=str(path)))
    else:
        print("saved", path)


def mpiexec() -> str | None:
    """The mpiexec beside this Python (the ``mpich`` wheel in .venv), else the one on PATH, else None."""
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def need_ranks(n: int, script: str, comm_size: int) -> bool:
    """Make sure a lesson for ``n`` ranks runs on ranks. Returns True when the caller is on ranks.

    ``script`` is the tutorial's file name (``"05_data_parallel.py"``), ``comm_size`` the number of ranks
    it was started with. Under ``mpiexec -n P`` (P >= 2) this returns True and the lesson goes on. In a
    notebook it runs the lesson under ``mpiexec -n n`` (``run_in_cells``), shows here what rank 0 printed up
    to this cell, and makes each later cell show its own output from the ranks, figures inline.
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
        print(f"$ {command}{' --quick' if quick() else ''}   (the lesson runs on {n} ranks; rank 0 prints)\n")
        outputs = run_in_cells(launcher, n, path)
        here = next(k for k, source in enumerate(code_cells(path)) if "need_ranks(" in source)
        for output in outputs[: here + 1]:  # the cells up to this one: their output on rank 0, here
            replay(output)
        _replay_remaining_cells(outputs[here + 1 :])
        return False
    _replay_remaining_cells([])
    return False


# ----------------------------------------------------------------------------- a lesson on ranks, cell by cell
CELL_MARK = "\x1eminidl-cell {}\x1e"  # rank 0 prints it where each code cell begins (a record separator)
RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")


def code_cells(path: Path) -> list[str]:
    """The sources of the code cells of a Jupytext "percent" lesson, in order."""
    import jupytext

    return [cell.source for cell in jupytext.read(path).cells if cell.cell_type == "code"]


def cells_script(path: Path) -> str:
    """The lesson as one script in which rank 0 prints ``CELL_MARK`` before each code cell."""
    rank0 = f"all(__import__('os').environ.get(v, '0') == '0' for v in {RANK_VARIABLES!r})"
    parts = [f"_minidl_rank0 = {rank0}\n"]
    for k, source in enumerate(code_cells(path)):
        parts.append(f"if _minidl_rank0:\n    print({CELL_MARK.format(k)!r}, flush=True)\n{source}\n")
    return "\n".join(parts)


def split_cells(stdout: str, cells: int) -> list[str]:
    """Rank 0's output cut at the cell marks: one string per code cell (a cell that printed nothing: "")."""
    outputs = [""] * cells
    pieces = stdout.split("\x1eminidl-cell ")
    outputs[0] = pieces[0]
    for piece in pieces[1:]:
        number, _, text = piece.partition("\x1e")
        outputs[int(number)] = text.lstrip("\n")
    return outputs


def run_in_cells(launcher: str, n: int, path: Path) -> list[str]:
    """Run the lesson under ``mpiexec -n n`` (figures saved, not shown) and return each code cell's output."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / path.name
        script.write_text(cells_script(path))
        args = [launcher, "-n", str(n), sys.executable, str(script)] + (["--quick"] if quick() else [])
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(TUTORIALS.parent))
        done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=TUTORIALS.parent)
    if done.returncode != 0:
        raise RuntimeError(
            f"`mpiexec -n {n} python {path.name}` failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
        )
    return split_cells(done.stdout, len(code_cells(path)))


def replay(output: str) -> None:
    """Print a cell's output from the ranks; a figure it saved ("saved PATH") is shown inline instead."""
    for line in output.splitlines():
        if line.startswith("saved ") and line.endswith((".png", ".svg")) and Path(line[6:]).is_file():
            show_file(Path(line[6:]))
        else:
            print(line)


def _replay_remaining_cells(outputs: list[str]) -> None:
    """Every later cell of this notebook shows its output from the ranks instead of running here (it ran there)."""
    import IPython

    ip = IPython.get_ipython()  # type: ignore[attr-defined]
    if ip is None:
        return
    _REPLAY[:] = outputs
    cell = "__import__('minidl.tools.tutorial').tools.tutorial._next_cell()\n"
    ip.input_transformers_post.append(lambda lines: [cell])


_REPLAY: list[str] = []


def _next_cell() -> None:
    """The output of the next cell from the ranks (nothing once the lesson's cells are done)."""
    if _REPLAY:
        replay(_REPLAY.pop(0))
