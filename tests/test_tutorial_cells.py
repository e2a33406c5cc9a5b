"""The MPI lessons as notebooks (issue 26): the lesson runs under mpiexec with rank 0 marking each code cell, so
each notebook cell shows its own output and figures; quick-mode plots say what they cannot show; under mpiexec,
pytest prints rank 0's progress once, with the skips' reasons."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
from helpers.signals import ENV, MPIEXEC

from minidl.tools import tutorial

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[1]
LESSON = "# %% [markdown]\n# A lesson.\n\n# %%\nprint('one')\n\n# %% [markdown]\n# Then.\n\n# %%\nx = 2\n\n# %%\nprint('three', x)\n"


def run_cells(tmp_path: Path, rank: str) -> str:
    lesson = tmp_path / "lesson.py"
    lesson.write_text(LESSON)
    script = tmp_path / "cells.py"
    script.write_text(tutorial.cells_script(lesson))
    env = {k: v for k, v in os.environ.items() if k not in tutorial.RANK_VARIABLES} | {"PMI_RANK": rank}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True).stdout


def test_each_code_cell_gets_its_own_output(tmp_path):
    assert tutorial.split_cells(run_cells(tmp_path, "0"), 3) == ["one\n", "", "three 2\n"]
    assert run_cells(tmp_path, "1") == "one\nthree 2\n"  # no marks from the other ranks


def test_a_saved_figure_is_shown_where_its_cell_is(tmp_path, monkeypatch, capsys):
    figure = tmp_path / "f.png"
    figure.write_bytes(b"png")
    shown = []
    monkeypatch.setattr(tutorial, "show_file", shown.append)
    tutorial.replay(f"before\nsaved {figure}\nafter\n")
    assert shown == [figure] and capsys.readouterr().out == "before\nafter\n"


def test_quick_mode_plots_say_what_they_cannot_show(monkeypatch):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    monkeypatch.setenv("MINIDL_QUICK", "1")
    tutorial.quick_note(ax, "too short to learn")
    monkeypatch.setenv("MINIDL_QUICK", "0")
    tutorial.quick_note(ax, "not written")
    assert [t.get_text() for t in ax.texts] == ["quick mode: too short to learn"]
    plt.close(fig)


@pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec")
def test_pytest_under_mpiexec_prints_rank_0_with_skip_reasons():
    command = [MPIEXEC, "-n", "2", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["tests/mpi/test_pipeline_mpi.py", "-k", "dp_by_pp"]
    proc = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("skipped") == 1 and out.count("[100%]") == 1, out
    assert "SKIPPED [2] tests/mpi/test_pipeline_mpi.py" in out and "at size 4 only" in out, out
