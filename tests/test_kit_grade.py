"""The grading run (issue 31, part 6): a class's folder where every way out of a submission is a verdict.

One run in a folder of nine submissions, each in its own process: a correct ring, the same in a folder of its
own, a wrong one, a deadlock, a sleep at import (past the wall limit), a segmentation fault, an os._exit at
import, a flood of output, a syntax error. The table, the JSON, the CSV and the saved reports are held to it.
"""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from collectives.check import main
from collectives.kit.grade import Finished, judge, kit_failure, kit_passed, kit_usage, run_isolated

RING = "from collectives import ring\n\ndef allreduce(comm, x, f):\n    return ring.allreduce(comm, x, f)\n"
CLASS = {
    "ana.py": RING,
    "ben/hw3.py": RING,
    "carl.py": RING.replace("return ring.allreduce(comm, x, f)", "return ring.allreduce(comm, x, f) + comm.Get_rank()"),
    "dora.py": "import numpy as np\n\ndef allreduce(comm, x, f):\n    p = comm.Get_size()\n"
    "    if p > 1:\n        comm.Recv(np.empty_like(x), source=(comm.Get_rank() + 1) % p)\n    return x.copy()\n",
    "eve.py": "import time\ntime.sleep(600)\n",
    "fay.py": "import ctypes\n\ndef allreduce(comm, x, f):\n    ctypes.string_at(0)\n",
    "gus.py": "import os\nos._exit(0)\n",
    "hal.py": "def allreduce(comm, x, f):\n    while True:\n        print('x' * 1000)\n",
    "ivy.py": "def allreduce(comm, x, f)\n    return x\n",
}
VERDICTS = {
    "ana": ("passed", ""),
    "ben": ("passed", ""),
    "carl": ("failed", "result"),
    "dora": ("failed", "completes"),
    "eve": ("timed out", "no verdict within 20 s"),
    "fay": ("crashed", "ended by SIGSEGV"),
    "gus": ("no verdict", "exit status 0 before the verdict"),
    "hal": ("flooded", "bytes of output"),
    "ivy": ("not loaded", "cannot import ivy.py: SyntaxError at ivy.py:1"),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    for name, source in CLASS.items():
        (root / "hw3" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "hw3" / name).write_text(source)
    cmd = [sys.executable, "-m", "collectives.check", "--grade", str(root / "hw3"), "--collective", "allreduce"]
    cmd += ["--examples", "3", "--timeout", "20", "--case-timeout", "2", "--cap", "20000"]
    cmd += ["--json", str(root / "grades.json"), "--csv", str(root / "grades.csv")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return root, done


def test_every_submission_gets_its_verdict_and_the_run_goes_on(graded):
    root, done = graded
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["submission"]: r for r in json.loads((root / "grades.json").read_text())}
    assert set(rows) == set(VERDICTS)
    for name, (verdict, words) in VERDICTS.items():
        assert rows[name]["verdict"] == verdict and words in rows[name]["property"], rows[name]
        assert rows[name]["passed"] == (verdict == "passed")
    assert rows["carl"]["case"].startswith("p=") and rows["dora"]["case"].startswith("p=2 ")
    assert 20 <= rows["eve"]["seconds"] < 40  # ended at the wall limit, not left running


def test_the_table_the_progress_the_csv_and_the_reports(graded):
    root, done = graded
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("[")][-1].startswith("[9/9] ivy: not loaded")
    assert all("ETA" in line for line in lines if line.startswith("["))
    head = next(i for i, line in enumerate(lines) if line.startswith("submission"))
    assert lines[head].split()[:4] == ["submission", "verdict", "property", "smallest"]
    assert lines[head + 3].split()[:3] == ["carl", "failed", "result"] and "2 of 9 passed" in done.stdout
    with open(root / "grades.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["verdict"] for r in table] == [v for v, _ in VERDICTS.values()]
    reports = root / "hw3-reports"
    report = (reports / "carl.txt").read_text()
    assert "carl.py:allreduce" in report.splitlines()[0] and "expected against got" in report
    assert (reports / "carl.png").is_file()  # the failure's space-time diagram, beside its report
    assert len((reports / "hal.txt").read_bytes()) < 30000  # the flood, cut at the cap


def test_the_table_reads_the_checks_real_output(graded):
    """The verdict parsers against the report a real failing check printed (held so when its format moves)."""
    root, _ = graded
    report = (root / "hw3-reports" / "carl.txt").read_text().split("\n", 1)[1]
    assert kit_failure(report) == ("result", json.loads((root / "grades.json").read_text())[2]["case"])
    assert kit_passed((root / "hw3-reports" / "ana.txt").read_text()) and not kit_passed(report)
    assert kit_usage((root / "hw3-reports" / "ivy.txt").read_text()).startswith("cannot import")
    for rc, output in [(0, "printed by the student\n"), (1, "")]:  # ended before the check said anything
        assert judge(Finished(rc, output, 1.0), kit_passed, kit_failure, kit_usage, "1 s")[0] == "no verdict"


def test_memory_and_time_limits_of_the_child(tmp_path):
    hog = [sys.executable, "-c", "import numpy as np; a = np.ones(2**31); print('allocated')"]
    done = run_isolated(hog, timeout=30, memory_mb=512)
    assert done.returncode == 1 and "MemoryError" in done.output and "allocated" not in done.output
    stuck = [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"]
    done = run_isolated(stuck, timeout=1)
    assert done.timed_out and done.returncode is None and done.seconds < 10  # its child ended with it


@pytest.mark.parametrize(
    "options, words",
    [
        (["--grade", "no/such/folder"], "no such folder"),
        (["--timeout", "nan"], "--timeout nan"),
        (["--seed", "-1"], "--seed -1"),  # the check's own option, refused before any submission runs
        (["--mpi"], "--mpi"),
    ],
)
def test_usage_errors_before_any_submission_runs(tmp_path, capsys, options, words):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "a.py").write_text(RING)
    with pytest.raises(SystemExit) as stop:
        main(["--grade", str(tmp_path / "class"), *options])
    assert stop.value.code == 2 and words in capsys.readouterr().err
    assert not Path(tmp_path / "class-reports").exists()


def test_ctrl_c_ends_the_submission_too_and_prints_the_table_so_far(tmp_path):
    import os
    import signal
    import time

    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "ana.py").write_text(RING)
    pid_file = tmp_path / "zed.pid"
    (tmp_path / "class" / "zed.py").write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                               "time.sleep(120)\n")  # fmt: skip
    cmd = [sys.executable, "-m", "collectives.check", "--grade", str(tmp_path / "class"), "--examples", "2"]
    grading = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        grading.send_signal(signal.SIGINT)  # as Ctrl-C: the submission has a session of its own and gets none
        out, _ = grading.communicate(timeout=30)
    finally:
        if grading.poll() is None:
            grading.kill()
    assert grading.returncode == 130, out
    assert "interrupted at zed: the table of the 1 graded so far" in out and "1 of 1 passed" in out, out
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # the sleeping submission was ended with the run
        os.kill(int(pid_file.read_text()), 0)


def test_grade_help_names_its_options_and_sends_the_rest_to_the_check(capsys):
    assert main(["--grade", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(o in out for o in ("--function", "--file", "--timeout", "--memory", "--json", "--csv", "--signature"))
