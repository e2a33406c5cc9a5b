"""The student-style suite of tests/kit_students proven under real MPI, without the kit.

For every file in tests/kit_students/MANIFEST.json this launches `mpiexec -n P python oracle.py ...` (an
independent check against NumPy, see tests/kit_students/oracle.py) at the world sizes and lengths its
`mpi_runs` name, and asserts the oracle's verdict: a correct file is right at p = 1..4 (n < p, n not
divisible by p included); a buggy file is shown wrong, hung or aborted where its bug breaks it (and right
where the manifest says it still works, so the run is the bug's and not a broken oracle's).
It launches mpiexec itself, so it runs under plain pytest (not in tests/mpi).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "kit_students"
MANIFEST = json.loads((HERE / "MANIFEST.json").read_text())["files"]
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (install the mpich extra)")


def oracle(entry: dict, run: dict) -> tuple[dict, str]:
    """One oracle run: its JSON verdict (verdict 'abort' when MPICH killed the job before any report)."""
    timeout = run.get("timeout", 10)
    cmd = [MPIEXEC, "-n", str(run["p"]), sys.executable, str(HERE / "oracle.py"), str(HERE / entry["file"])]
    cmd += [entry["function"], "--collective", entry["collective"], "--signature", entry["signature"]]
    for n in run["n"]:
        cmd += ["--n", str(n)]
    cmd += ["--ops", run.get("ops", "sum"), "--op-style", entry.get("op_style", "python")]
    cmd += ["--root", str(run.get("root", 0)), "--calls", str(run.get("calls", 2)), "--timeout", str(timeout)]
    cmd += ["--comm", run.get("comm", "dup")]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):  # two ranks may print at once: read the first object on the line
            return json.JSONDecoder().raw_decode(line)[0], proc.stdout + proc.stderr
    assert proc.returncode != 0, f"no verdict and rc 0:\n{proc.stdout}\n{proc.stderr}"
    return {"verdict": "abort", "rc": proc.returncode}, proc.stdout + proc.stderr


def batched(run: dict) -> bool:
    return run["expect"] == ["ok"] and "comm" not in run


@functools.cache
def batch(p: int) -> dict[tuple, dict]:
    """One job at world size p for every run that expects 'ok' there (mpiexec starts cost seconds here)."""
    cmd = [MPIEXEC, "-n", str(p), sys.executable, str(HERE / "oracle.py"), "--batch", str(HERE / "MANIFEST.json")]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env).stdout
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace")
    verdicts = [json.JSONDecoder().raw_decode(line)[0] for line in out.splitlines() if line.startswith("{")]
    return {key(v["file"], v): v for v in verdicts if v["verdict"] == "ok"}


def key(file: str, run: dict) -> tuple:
    return file, tuple(run["n"]), run.get("ops", "sum"), run.get("root", 0)


def verdict(entry: dict, run: dict) -> tuple[dict, str]:
    """The oracle's verdict on one run: from the batch job of its size when it was 'ok' there, else its own job
    (a run that failed in the batch, or stopped it, is run alone so that the failure is its own)."""
    if batched(run) and key(entry["file"], run) in batch(run["p"]):
        return batch(run["p"])[key(entry["file"], run)], "(batch)"
    return oracle(entry, run)


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_manifest_verdict_under_mpich(entry):
    assert entry["mpi_runs"], "every file needs a run that proves its verdict"
    broke = False
    for run in entry["mpi_runs"]:
        got, output = verdict(entry, run)
        where = f"{entry['file']} at p={run['p']} n={run['n']}: {got}\n{output[-2000:]}"
        assert got["verdict"] in run["expect"], where
        if got["verdict"] == "wrong":
            assert set(run.get("shows", [])) <= set(got["failed"]), where
        if "error" in run:
            assert run["error"] in got["error"].lower() or run["error"] in output.lower(), where
        broke |= got["verdict"] != "ok"
    if entry["verdict"] == "correct":
        assert {r["p"] for r in entry["mpi_runs"] if r["expect"] == ["ok"]} >= {1, 2, 3, 4}
        assert any(n < r["p"] or n % r["p"] for r in entry["mpi_runs"] for n in r["n"] if r["expect"] == ["ok"])
    else:
        assert broke, f"{entry['file']}: the manifest's runs never show its bug"
