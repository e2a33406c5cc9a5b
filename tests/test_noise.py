"""Noise a newcomer met (issue 32, item 10): a notebook cell that ends with ``tutorial.show(...)`` printed
``Out[7]: PosixPath('.../tutorials/out/08_networks.png')``; ``make docs`` printed "[IPKernelApp] WARNING | Kernel is
running over TCP without encryption" once per notebook; the install printed setuptools' "Editable installation"
box. Each is held here to its quiet form."""

from __future__ import annotations

import re
import shutil
import sys
import warnings
from pathlib import Path

import pytest

from minidl.tools import tutorial

ROOT = Path(__file__).resolve().parents[1]


def test_show_returns_nothing_for_a_cell_to_echo(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(tutorial, "out_dir", lambda: tmp_path)
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    assert tutorial.show(fig, "a.png") is None and (tmp_path / "a.png").stat().st_size > 0
    assert tutorial.show_file(tmp_path / "a.png") is None


@pytest.mark.skipif(shutil.which("jupyter", path=str(Path(sys.executable).parent)) is None, reason="no jupyter")
def test_a_notebook_kernel_runs_without_the_tcp_warning(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("MINIDL_QUICK", "1")  # execute() sets it and drops MPLBACKEND: both restored after the test
    monkeypatch.setenv("MPLBACKEND", "Agg")
    sys.path.insert(0, str(ROOT / "tutorials"))
    try:
        import run_notebooks
    finally:
        sys.path.remove(str(ROOT / "tutorials"))
    script = tmp_path / "00_tiny.py"
    script.write_text("# %%\nfrom pathlib import Path\n\n# %%\nPath('x')\n")
    run_notebooks.execute(script, tmp_path)
    out, err = capfd.readouterr()
    assert "without encryption" not in out + err and "IPKernelApp" not in out + err, err
    assert (tmp_path / "00_tiny.ipynb").exists()


def test_the_editable_installs_hide_setuptools_box():
    makefile = (ROOT / "Makefile").read_text()
    quiet = re.search(r'^QUIET_EDITABLE := PYTHONWARNINGS="(ignore:[^"]+)"$', makefile, re.M)
    assert quiet, "the Makefile lost its warning filter for editable installs"
    for line in makefile.splitlines():
        if re.search(r"\$\(BIN\)/python -m pip install .*-e ", line):
            assert line.lstrip().startswith("$(QUIET_EDITABLE) "), line
    setuptools_warnings = pytest.importorskip("setuptools.warnings")
    box = setuptools_warnings.InformationOnly._format("Editable installation.", "Please be careful with folders")
    _, message = quiet.group(1).split(":", 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=re.escape(message))  # what PYTHONWARNINGS sets
        warnings.warn(box, setuptools_warnings.InformationOnly, stacklevel=1)
    assert caught == [], "the filter does not match setuptools' box"


def test_the_tutorials_folder_is_found_from_minidl_tools():
    """minidl/tools/tutorial.py looked for tutorials/ one folder too low after its move into minidl/tools: figures
    went to ./tutorial_out and the notebooks of tutorials 07 and 09 could not import the benchmarks' harness."""
    assert tutorial.TUTORIALS == ROOT / "tutorials" and (tutorial.TUTORIALS / "run_notebooks.py").is_file()
    assert (tutorial.TUTORIALS.parent / "benchmarks" / "compare.py").is_file()
