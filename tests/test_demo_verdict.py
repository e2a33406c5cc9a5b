"""The demo's last lines (issue 32, items 4 and 5): a verdict on the gap to the corpus's optimum (what a good gap
is, and why 0% is out of reach), and a line saying that the machine was busy when a rank had less than 80% of a
core while it trained (as tutorial 05 says so of its measurements)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import collectives
from minidl.distributed.comm import SingleProcess
from minidl.distributed.strategy import Context
from minidl.train.__main__ import main
from minidl.train.lm import LMTask
from minidl.train.loop import busy_note


def verdict(gap: float) -> str:
    task = SimpleNamespace(corpus=SimpleNamespace(train=SimpleNamespace(size=300_000)))
    (line,) = LMTask.verdict(task, {"gap": gap, "steps": 1496})
    return line


@pytest.mark.parametrize(
    "gap, grade",
    [(0.078, "+7.8%: good"), (0.10, "+10.0%: good"), (0.2, "+20.0%: fair"), (3.5, "+350.0%: far: train longer")],
)
def test_the_gap_gets_a_verdict_and_the_reason_the_optimum_is_out_of_reach(gap, grade):
    line = verdict(gap)
    assert line.startswith(f"gap {grade}") and "(within 10% is good, within 25% fair)" in line
    assert "0% is the HMM that wrote the text, reached only with unlimited text and training" in line
    assert "1,496 SGD steps on 300,000 words of text" in line


def test_no_verdict_without_a_known_optimum():
    assert LMTask.verdict(SimpleNamespace(), {"test_ppl": 80.0, "steps": 10}) == []


def test_a_run_prints_the_verdict_after_its_score(capsys):
    assert main(["lm", "--quick", "--max-steps", "3", "--log-every", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    score = next(i for i, line in enumerate(lines) if line.startswith("test perplexity"))
    assert lines[score + 1].startswith("gap +") and "within 10% is good" in lines[score + 1]


def one_process() -> SimpleNamespace:
    return SimpleNamespace(ctx=Context(SingleProcess()))


def test_busy_note_only_when_a_core_was_shared():
    assert busy_note(one_process(), 0.97) == []
    assert busy_note(one_process(), 1.6) == []  # a second thread (the overlap's) counts no more than a core
    (line,) = busy_note(one_process(), 0.41)
    assert line.startswith("the machine was busy: the process had 41% of a core while it trained (load ")
    assert line.endswith("the speed above is below what this machine does idle")


def test_busy_note_names_the_least_served_rank_on_every_rank():
    def run(comm, shares):
        ctx = Context(comm, comm.Get_rank(), comm.Get_size())
        return busy_note(SimpleNamespace(ctx=ctx), shares[comm.Get_rank()])

    notes = collectives.simulate(3, run, [0.95, 0.52, 0.9], timeout=30)
    assert all(n == notes[0] for n in notes) and "a rank had 52% of a core" in notes[0][0]
    assert collectives.simulate(2, run, [0.95, 0.9], timeout=30) == [[], []]


def test_docs_using_md_shows_the_verdict_the_demo_prints():
    """docs/using.md's demo ending: its gap line is what LMTask.verdict prints for its score line's numbers."""
    import re
    from pathlib import Path

    from minidl.data.corpus_gen import generated_corpus

    page = (Path(__file__).resolve().parents[1] / "docs" / "using.md").read_text()
    score = re.search(r"^test perplexity ([\d.]+) \| corpus optimum ([\d.]+) .*?\| (\d+) steps in", page, re.M)
    shown = re.search(r"^gap .*$", page, re.M)
    assert score and shown, "docs/using.md: the demo's ending is gone"
    task = SimpleNamespace(corpus=generated_corpus("default", seed=0))
    gap = float(score.group(1)) / float(score.group(2)) - 1
    assert LMTask.verdict(task, {"gap": gap, "steps": int(score.group(3))}) == [shown.group(0)]
