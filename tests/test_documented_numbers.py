"""The numbers README.md and docs/ quote hold (issue 26): the described simulator tables and the ZeRO bytes are
re-run by benchmarks/docs_numbers.py and compared; the README's old ZeRO numbers (another model's) are caught."""

from __future__ import annotations

import pytest

from benchmarks import docs_numbers
from benchmarks.zero import table

OLD_README = (
    "`python benchmarks/zero.py` ... plain data parallelism 23.1 MB, stage 1 15.9 MB, stage 2 10.1 MB, stage 3 5.8 MB"
)


@pytest.fixture(scope="module")
def zero_rows() -> list[dict]:
    return table(4)


def test_every_documented_number_still_comes_out_of_its_command(zero_rows):
    checked, problems = 0, []
    for path, text in docs_numbers.documents().items():
        for n, wrong in (docs_numbers.check_simulated(path, text), docs_numbers.check_zero(path, text, zero_rows)):
            checked, problems = checked + n, problems + wrong
    assert checked >= 2, "no document quotes a described simulator table and the ZeRO bytes any more"
    assert problems == []


def test_numbers_of_another_model_are_caught(zero_rows):
    n, problems = docs_numbers.check_zero("README.md", OLD_README, zero_rows)
    assert n == 1 and problems == [
        "README.md: benchmarks/zero.py at P = 4 now gives 74.45 / 51.19 / 32.57 / 18.61 MB, "
        "the text says 23.1 / 15.9 / 10.1 / 5.8"
    ]


def test_a_table_line_that_moved_is_caught():
    command = "python -m minidl.simulate lm --profile params=4653200,rate=4765,batch=400,unit=words --nodes 1,4 \\\n"
    command += "    --network 1gbe --allreduce ring\n"
    text = f"```sh\n{command}```\n\n```\n     4      4  ring               1gbe             9,999     1,241\n```\n"
    n, problems = docs_numbers.check_simulated("docs/x.md", text)
    assert n == 1 and len(problems) == 1 and "no longer prints" in problems[0]


OUTPUT_FLAGS = ("--save", "--save-profile", "--timeline", "--log-json", "--plot", "--out", "--json-out")


def root_outputs(text: str) -> list[str]:
    """Output paths of documented commands (lines starting with python, mpiexec or make) that name no folder."""
    bad = []
    for line in text.splitlines():
        words = line.strip().split()
        if not words or words[0] not in ("python", "mpiexec", "make", "MINIDL_QUICK=1"):
            continue
        for flag, value in zip(words, words[1:]):
            if flag in OUTPUT_FLAGS and not value.startswith("-") and "/" not in value and "$" not in value:
                bad.append(f"{flag} {value}")
    return bad


def test_documented_commands_write_no_files_into_the_repository_root():
    assert root_outputs("python -m minidl.train lm --save model.npz --timeline runs/t.json") == ["--save model.npz"]
    found = {path: root_outputs(text) for path, text in docs_numbers.documents().items()}
    assert {path: bad for path, bad in found.items() if bad} == {}


def test_the_benchmark_figure_goes_under_runs():
    from collectives.bench import DEFAULT_PLOT

    assert DEFAULT_PLOT.split("/")[0] == "runs"
