"""python -m minidl.plot on damaged logs (issue 32, part 4): a log whose last line a full disk cut is plotted up to
what is complete, with one warning (it was refused whole); a line that is a JSON array is one line, not a
traceback; a file with no record at all is one error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minidl.tools import plot


def log_lines(n: int) -> list[str]:
    """A --log-json log of ``n`` training records and a closing evaluation, as the trainer writes it."""
    lines = [json.dumps({"kind": "machine", "cpu": {"model": "test", "cores": 2}})]
    lines += [json.dumps({"kind": "train", "step": s, "ppl": 100.0 / s, "elapsed": 0.1 * s}) for s in range(1, n + 1)]
    lines.append(json.dumps({"kind": "eval", "split": "test", "step": n, "ppl": 50.0, "elapsed": 0.1 * n}))
    return lines


def run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, Path]:
    log, png = tmp_path / "run.jsonl", tmp_path / "run.png"
    log.write_text(text)
    status = plot.main([str(log), "--out", str(png)])
    out, err = capsys.readouterr()
    return status, out, err, png


def test_a_last_line_cut_by_a_full_disk_is_left_out_with_a_warning(tmp_path, capsys):
    lines = log_lines(51)
    cut = "\n".join(lines[:-1]) + "\n" + lines[-1][:17]  # the disk filled in the middle of the last record
    status, out, err, png = run(tmp_path, cut, capsys)
    assert status == 0 and png.stat().st_size > 0 and "wrote" in out
    assert err.count("\n") == 1 and err.startswith("python -m minidl.plot: warning: ")
    assert f"left out 1 line(s) that are not complete JSON records (line {len(lines)}: cut short)" in err
    assert "plotting the other 52" in err  # the machine record and the 51 training records
    assert plot.curves(plot.read_log(str(tmp_path / "run.jsonl")))[1]["train"][-1][0] == 51


def test_a_resumed_run_appending_after_a_cut_line_keeps_both_parts(tmp_path, capsys):
    lines = log_lines(6)
    text = "\n".join(lines[:4]) + "\n" + lines[4][:10] + lines[5] + "\n" + "\n".join(lines[6:]) + "\n"
    status, _, err, _ = run(tmp_path, text, capsys)
    assert status == 0 and "line 5: not JSON" in err and "plotting the other 6" in err


def test_a_json_array_line_is_one_line_not_a_traceback(tmp_path, capsys):
    lines = log_lines(3)
    status, _, err, _ = run(tmp_path, "\n".join([*lines[:2], "[1, 2, 3]", *lines[2:]]) + "\n", capsys)
    assert status == 0 and "Traceback" not in err and err.count("\n") == 1
    assert "line 3: a JSON list, not a record" in err
    status, _, err, _ = run(tmp_path, "[1, 2, 3]\n[4]\n", capsys)
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("python -m minidl.plot: error: ") and "line 1: a JSON list, not a record" in err


def test_a_file_that_is_not_a_log_is_one_error_line(tmp_path, capsys):
    status, _, err, _ = run(tmp_path, "PK\x03\x04 binary checkpoint bytes\n", capsys)
    assert status == 2 and err.count("\n") == 1 and "no line is a JSON record" in err
