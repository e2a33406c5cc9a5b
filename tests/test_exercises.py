"""Every exercise's checker, proved both ways: the untouched skeleton fails it, the reference solution passes.

Plus one deliberately wrong solution per exercise (the reference with one line changed) that must fail
with the property named, a solution tuned to the visible cases that --submit finds out, the hidden
hashes regenerated from the solutions, and the command line's exit codes.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from minidl.exercises import EXERCISES, find, run
from minidl.exercises import check_collectives as cc
from minidl.exercises.core import HERE, SEEDS, load, sha256
from minidl.exercises.hashes import HIDDEN

NAMES = [ex.name for ex in EXERCISES]


@pytest.fixture(autouse=True)
def few_examples(monkeypatch):
    """Fewer hypothesis examples than a student's check runs (the kit's edge cases always run), no diagrams."""
    monkeypatch.setattr(cc, "EXAMPLES", {"check": 8, "submit": 8})
    monkeypatch.setattr(cc, "MAX_RANKS", 9)
    monkeypatch.setattr(cc, "DIAGRAM", "")  # no PNG (matplotlib) for the wrong solutions' reports


@pytest.mark.parametrize("name", NAMES)
def test_untouched_skeleton_fails_as_not_implemented(name, tmp_path, monkeypatch, capsys):
    from minidl.exercises.__main__ import main

    monkeypatch.chdir(tmp_path)  # no exercises/ copy here: `check` reads the untouched skeleton
    assert main(["check", name]) == 1
    out = capsys.readouterr().out
    assert "not implemented yet: " in out and "Traceback" not in out, out
    assert run(find(name), find(name).skeleton).prop == "implemented"


@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_passes(name):
    ex = find(name)
    outcome = run(ex, ex.solution)
    assert outcome.passed, outcome.text


# (exercise, the line of the reference solution to change, what to change it to, words of the property)
WRONG = [
    ("logsumexp", "m = x.max(axis=-1, keepdims=True)", "m = np.zeros_like(x[..., :1])", "stable"),
    ("logsumexp", "np.exp(x - y)", "np.exp(x)", "gradcheck"),
    ("lstm_cell_backward", "dc = dc_next + dh_next", "dc = dh_next", "gradient"),
    ("ring_allreduce", "for s in range(p - 1):  # allgather", "for s in range(p - 2):  # allgather", ""),
    ("tree_broadcast", "vr = (rank - root) % p", "vr = rank", ""),
    ("recursive_doubling", "rem = p - pof2", "rem = 0", ""),
    ("one_f_one_b", "warmup = min(num_stages - stage - 1, num_micro)", "warmup = num_micro", "warm-up"),
    ("average_gradients", "weight = count / total", "weight = 1 / comm.Get_size()", "one process"),
    ("average_gradients", "np.zeros_like(p.data) if p.grad is None else p.grad", "p.grad", "runs"),  # no samples
    ("zero1", "np.zeros(self.hi - self.lo)", "np.zeros(n)", "state sharded"),
]


@pytest.mark.parametrize("name, old, new, words", WRONG)
def test_a_wrong_solution_fails_naming_the_property(tmp_path, name, old, new, words):
    ex = find(name)
    source = ex.solution.read_text()
    assert old in source
    wrong = tmp_path / ex.filename
    wrong.write_text(source.replace(old, new))
    outcome = run(ex, wrong)
    assert not outcome.passed
    assert outcome.prop and outcome.prop not in ("implemented", "imports", "defines"), outcome.text
    assert words in outcome.prop and "smallest case" in outcome.text, outcome.text


def test_submit_finds_out_a_solution_tuned_to_the_visible_cases(tmp_path):
    """Right for every visible (m, p), GPipe beyond them: the visible check passes, --submit fails."""
    ex = find("one_f_one_b")
    source = ex.solution.read_text().replace(
        "    warmup = min(",
        "    if num_micro > 6:\n        return [('F', i) for i in range(num_micro)] + [('B', i) for i in range(num_micro)]\n    warmup = min(",
    )
    tuned = tmp_path / ex.filename
    tuned.write_text(source)
    assert run(ex, tuned, "check").passed
    assert not run(ex, tuned, "submit", seed=1).passed
    assert not run(ex, tuned, "hidden").passed


@pytest.mark.parametrize("name", NAMES)
def test_solutions_pass_submit_and_the_stored_hashes_are_theirs(name):
    ex = find(name)
    module = load(ex.solution)
    assert HIDDEN[name] == tuple(sha256(ex.digest(module, seed)) for seed in SEEDS)
    assert run(ex, ex.solution, "submit", seed=12345).passed
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in HIDDEN[name])  # SHA-256 digests, no values


def test_no_checker_imports_a_solution():
    for path in HERE.glob("check_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any("solutions" in n for n in names), f"{path.name} imports {names}"


def test_each_exercise_uses_only_earlier_ones():
    """A skeleton or solution imports minidl's and collectives' modules, never another exercise's file."""
    for ex in EXERCISES:
        for path in (ex.skeleton, ex.solution):
            for node in ast.walk(ast.parse(path.read_text())):
                module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
                assert not any(w in module for w in ("skeletons", "solutions")), f"{path} imports {module}"


def test_command_line(tmp_path, monkeypatch, capsys):
    from minidl.exercises.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(n in listed for n in NAMES) and "minidl/exercises/skeletons" in listed
    assert main(["check", "no_such_exercise"]) == 2
    assert main(["check", "one_f_one_b", "--file", "missing.py"]) == 2
    assert main(["start", "one_f_one_b"]) == 0 and (tmp_path / "exercises" / "06_one_f_one_b.py").is_file()
    assert main(["start", "one_f_one_b"]) == 2  # never overwrites the student's copy
    assert main(["check", "6", "--solution", "--submit", "--seed", "3"]) == 0
    # the real entry point, on the untouched copy that `start` made
    cmd = [sys.executable, "-m", "minidl.exercises", "check", "one_f_one_b"]
    failed = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "not implemented yet: one_f_one_b" in failed.stdout, failed.stdout + failed.stderr


# -- every way out of a student's code is a verdict (issue 31, part 5), and a class graded at once (part 6)
def _ring_with(tmp_path, line: str):
    """The reference ring with ``line`` as the first statement of allreduce."""
    source = find("ring_allreduce").solution.read_text()
    head = next(s for s in source.splitlines() if s.startswith("def allreduce("))
    path = tmp_path / "03_ring_allreduce.py"
    path.write_text(source.replace(head, f"{head}\n    {line}"))
    return path


@pytest.mark.parametrize("line", ["import sys; sys.exit(0)", "import os; os._exit(0)"])
def test_an_exit_in_the_solution_never_passes_submit(tmp_path, capsys, line):
    from minidl.exercises.__main__ import main

    path = _ring_with(tmp_path, line)
    assert main(["check", "ring_allreduce", "--file", str(path), "--submit", "--seed", "1"]) == 1
    out = capsys.readouterr().out
    assert "PASS" not in out and ("SystemExit" in out or "no verdict" in out), out


def test_an_endless_forward_gets_a_verdict_at_the_time_limit(tmp_path, capsys):
    from minidl.exercises.__main__ import main

    source = find("logsumexp").solution.read_text()
    head = next(s for s in source.splitlines() if s.strip().startswith("def forward("))
    path = tmp_path / "01_logsumexp.py"
    path.write_text(source.replace(head, f"{head}\n        while True:\n            pass"))
    assert main(["check", "logsumexp", "--file", str(path), "--time-limit", "3"]) == 1
    assert "FAIL logsumexp: timed out: no verdict within 3 s" in capsys.readouterr().out


def test_a_sleeping_collective_fails_at_the_first_run_not_after_every_rerun(tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(cc, "CASE_TIMEOUT", 0.5)
    start = time.perf_counter()
    outcome = run(find("ring_allreduce"), _ring_with(tmp_path, "import time; time.sleep(30)"))
    assert outcome.prop == "completes" and "no return within 0.5 s" in outcome.text, outcome.text
    assert time.perf_counter() - start < 5  # was 116 s: 60 s in the first run, then 20 s per rerun of the kit


def test_bad_seed_and_a_file_in_the_way_are_one_line(tmp_path, monkeypatch, capsys):
    from minidl.exercises.__main__ import main

    with pytest.raises(SystemExit) as stop:  # was a failure of the reference solution
        main(["check", "logsumexp", "--solution", "--submit", "--seed", "-3"])
    assert stop.value.code == 2 and "--seed -3: a seed is a non-negative integer" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exercises").write_text("not a folder")
    assert main(["start", "logsumexp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot copy the skeleton to exercises/01_logsumexp.py" in err, err


def test_grade_a_class_copies_of_one_exercise(tmp_path):
    ex = find("logsumexp")
    solution = ex.solution.read_text()
    copies = {
        "ana.py": solution,
        "ben/01_logsumexp.py": solution,
        "carl.py": ex.skeleton.read_text(),
        "dora.py": solution.replace("m = x.max(axis=-1, keepdims=True)", "m = np.zeros_like(x[..., :1])"),
        "eve.py": "import time\ntime.sleep(60)\n",
        "fay.py": "import os\nos._exit(0)\n",
    }
    for name, source in copies.items():
        (tmp_path / "class" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "class" / name).write_text(source)
    cmd = [sys.executable, "-m", "minidl.exercises", "grade", str(tmp_path / "class"), "logsumexp", "--seed", "5"]
    cmd += ["--timeout", "15", "--json", str(tmp_path / "grades.json")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["submission"]: r for r in json.loads((tmp_path / "grades.json").read_text())}
    got = {name: (r["verdict"], r["property"]) for name, r in rows.items()}
    assert got == {
        "ana": ("passed", ""),
        "ben": ("passed", ""),
        "carl": ("failed", "not implemented yet: LogSumExp.forward"),
        "dora": ("failed", "forward, stable (no overflow)"),
        "eve": ("timed out", "no verdict within 15 s"),
        "fay": ("no verdict", "exit status 0 before the verdict (sys.exit or os._exit in the code?)"),
    }, done.stdout
    assert rows["dora"]["case"].startswith("x of shape") and "2 of 6 passed" in done.stdout
    assert "hidden" in (tmp_path / "class-reports" / "ana.txt").read_text()  # --submit: the hidden cases ran
