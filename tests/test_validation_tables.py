"""The validation tables' printer (benchmarks/validation_tables.py), on sample runs: the numbers it prints, the
10% verdict against real runs, and the one line it prints where a saved run is absent."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import validation_tables as vt

HERE = {
    "date": "2026-11-25",
    "command": "python benchmarks/simulate_validation.py --part here --json x.json",
    "machine": "test machine, 2 cores",
    "rows": [
        {"p": 2, "measured": [20_000, 21_000, 19_000], "predicted": [21_000, 20_000, 22_000], "other_tasks": [0, 1, 0]},
        {"p": 1, "measured": [10_000, 10_400, 9_800], "predicted": [10_500, 10_400, 9_900], "other_tasks": [0, 0, 0]},
    ],
}


def _sgrow(p, topology, minidl_s, formula_s, simgrid_s=1.0):
    return {"p": p, "topology": topology, "simgrid_s": simgrid_s, "minidl_s": minidl_s, "formula_s": formula_s}


def test_here_table_prints_medians_spreads_and_ratios():
    lines = vt.here_table(HERE["rows"])
    assert lines[0].split()[:3] == ["p", "measured", "words/s"]
    p1, p2 = lines[1].split(), lines[2].split()  # sorted by p
    # p = 1: medians 10,000 and 10,400; ratio of the medians 1.04; per-repeat ratios 1.05, 1.00, 1.0102
    assert p1 == ["1", "10,000", "[9,800-10,400]", "10,400", "[9,900-10,500]", "1.04x", "[1.00-1.05]", "0.0"]
    # p = 2: 21,000 / 20,000 = 1.05; per-repeat 1.05, 0.952, 1.158
    assert p2 == ["2", "20,000", "[19,000-21,000]", "21,000", "[20,000-22,000]", "1.05x", "[0.95-1.16]", "0.0"]
    assert lines[-1].startswith("every p within 10%")


def test_here_verdict_names_the_p_outside_10_percent():
    rows = [dict(r) for r in HERE["rows"]]
    rows[0] = {**rows[0], "predicted": [26_000, 25_000, 27_000]}  # p = 2: 26,000 / 20,000 = 1.3x
    assert vt.here_ratio(rows[0]) == pytest.approx(1.3)
    verdict = vt.here_verdict(rows)
    assert verdict.startswith("not every p within 10%") and "p = 2 outside" in verdict
    assert "p = 1" not in verdict
    low = [{"p": 3, "measured": [100.0], "predicted": [89.0]}]  # 0.89x: under-prediction counts too
    assert vt.here_verdict(low).startswith("not every p")
    assert vt.here_table(low)[1].split()[-1] == "-"  # no other_tasks recorded


def test_saved_here_prints_provenance_then_table(tmp_path):
    path = tmp_path / "here.json"
    path.write_text(json.dumps(HERE))
    lines = vt.saved_here(str(path))
    assert lines[0].startswith(f"saved in {path} on 2026-11-25 by `{HERE['command']}` (test machine, 2 cores)")
    assert lines[1:] == vt.here_table(HERE["rows"])


def test_absent_files_give_one_line_with_the_command(tmp_path):
    (here,) = vt.saved_here(str(tmp_path / "none.json"))
    assert "no saved real-run comparison" in here and vt.HERE_COMMAND in here
    assert vt.HERE_COMMAND.startswith("python benchmarks/simulate_validation.py --part here --json docs/data/")
    (simgrid,) = vt.saved_simgrid(str(tmp_path / "none.json"))
    assert "no saved SimGrid run" in simgrid and vt.SIMGRID_COMMAND in simgrid


def test_simgrid_table_per_p_and_topology(tmp_path):
    rows = [
        _sgrow(8, "crossbar", 1.0, 1.0),
        _sgrow(8, "torus2d", 1.0, 1.0),
        _sgrow(24, "crossbar", 1.0001, 1.0),
        _sgrow(24, "torus2d", 0.9997, 1.24),
    ]
    lines = vt.simgrid_table(rows)
    table = {(ln.split()[0], ln.split()[1]): ln.split()[2:] for ln in lines[1:]}
    assert list(table) == [("8", "all"), ("24", "all"), ("8", "crossbar"), ("24", "crossbar"), ("8", "torus2d"),
                           ("24", "torus2d")]  # fmt: skip
    assert table["24", "all"] == ["2", "0.03%", "0.02%", "24%"]  # max, mean |err|, the closed form's max
    assert table["8", "all"] == ["2", "0%", "0%", "0%"]
    assert vt.simgrid_verdict(rows) == "4 cases; largest |minidl / SimGrid - 1| 0.03%: within the 3% target"
    # saved rows: with a header, or a bare list (rows saved before the header existed)
    for saved in ({"date": "2026-11-25", "command": "c", "machine": "m", "rows": rows}, rows):
        path = tmp_path / "sg.json"
        path.write_text(json.dumps(saved))
        lines = vt.saved_simgrid(str(path))
        assert lines[0].startswith(f"saved in {path}") and lines[1:-1] == vt.simgrid_table(rows)
    assert lines[0] == f"saved in {path}:"


def test_committed_simgrid_run_is_within_target():
    """docs/data/simgrid_validation.json, the run docs/simulator-validation.md and tutorial 08 show."""
    if not vt.os.path.exists(vt.SIMGRID_FILE):
        pytest.skip("no saved SimGrid run")
    saved = vt.load(vt.SIMGRID_FILE)
    assert saved["date"] and saved["command"].startswith("python benchmarks/simgrid_validation.py")
    assert max(abs(vt.error(r)) for r in saved["rows"]) < 0.03


def test_docs_table_is_the_saved_run():
    """docs/simulator-validation.md's SimGrid table is what `--table docs/data/simgrid_validation.json` prints."""
    if not vt.os.path.exists(vt.SIMGRID_FILE):
        pytest.skip("no saved SimGrid run")
    page = open(vt.os.path.join(vt.ROOT, "docs", "simulator-validation.md")).read()
    section = page.split("## 1. Against SimGrid", 1)[1].split("\n## ", 1)[0]
    tables = re.findall(r"```\n( +p  topology.*?)```", section, flags=re.S)
    assert tables, "no table in section 1"
    assert tables[0].splitlines() == vt.simgrid_table(vt.load(vt.SIMGRID_FILE)["rows"])
