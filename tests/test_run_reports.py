"""What a training run says (issue 26): progress with an ETA (a bar on a terminal, plain lines in a log), JSON
records with wall time (and ``python -m minidl.plot`` drawing them), a header naming the flags that change the
run, the vocabulary the run really uses, the oversubscription warning, one short line for a flag typo under
mpiexec, and one line with exit 2 for a CNN --data directory without IDX files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.signals import ENV, MPIEXEC

from minidl.tools import plot, threads
from minidl.train import cnn, lm

QUICK = ["--quick", "--max-steps", "4", "--log-every", "2"]


def test_log_records_carry_wall_time_and_plot_draws_them(tmp_path, capsys):
    log = tmp_path / "run.jsonl"
    lm.main([*QUICK, "--log-json", str(log)])
    out = capsys.readouterr().out
    assert "50% ETA" in out and "100% ETA 0:00" in out and "[#" not in out, out  # plain lines: no bar
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[0]["kind"] == "machine"
    elapsed = [r["elapsed"] for r in records[1:]]
    assert elapsed == sorted(elapsed) and all(r["time"] > 1.7e9 for r in records[1:])
    assert plot.main([str(log), "--out", str(tmp_path / "run.png")]) == 0
    assert (tmp_path / "run.png").stat().st_size > 10_000


def test_plot_refuses_a_log_without_training_records(tmp_path, capsys):
    log = tmp_path / "empty.jsonl"
    log.write_text('{"kind": "machine"}\n')
    assert plot.main([str(log)]) == 2
    assert "no training records" in capsys.readouterr().err


def test_a_terminal_gets_a_bar_and_the_header_names_the_flags(monkeypatch, capsys):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    lm.main([*QUICK, "--precision", "fp16", "--loss-scale", "dynamic"])
    out = capsys.readouterr().out
    assert "[##########..........] 50% ETA" in out, out
    assert "flags that change the run: --max-steps 4 --precision fp16 --loss-scale dynamic" in out, out


def test_print_config_gives_the_vocabulary_the_run_uses(capsys):
    settings = lm.main(["--print-config"])
    assert settings["preset"] == "demo" and settings["config"]["vocab_size"] == 755


def test_more_ranks_than_cores_warn_without_a_thread_variable(capsys):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before, cores = threadpoolctl.threadpool_info(), os.cpu_count() or 1
    try:
        threads.limit_blas_threads({"MPI_LOCALNRANKS": str(2 * cores), "PMI_RANK": "0"})
    finally:
        for pool in before:
            threadpoolctl.threadpool_limits(pool["num_threads"], user_api=pool["user_api"])
    assert f"warning: {2 * cores} ranks x 1 thread on {cores} cores" in capsys.readouterr().err


@pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec")
def test_a_flag_typo_under_mpiexec_is_one_line_with_the_nearest_flag():
    command = [MPIEXEC, "-n", "2", sys.executable, "-m", "minidl.train", "lm", "--batch-szie", "4"]
    proc = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "python -m minidl.train lm: error: unrecognized arguments: --batch-szie 4 (did you mean --batch-size?); "
        "the flags: python -m minidl.train lm --help"
    ], proc.stderr
    assert "usage:" not in proc.stdout + proc.stderr


def test_cnn_data_without_idx_files_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cnn.main(["--data", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing train-images-idx3-ubyte" in err[0], err
