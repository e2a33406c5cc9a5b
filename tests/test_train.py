"""The training programs (``python -m minidl.train lm|cnn``) on small settings: they learn, they resume
exactly, they read real files, and they say what is wrong with bad arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minidl.data.idx import save_idx
from minidl.train import cli, cnn, lm
from minidl.train.__main__ import main as train_main

ROOT = Path(__file__).resolve().parents[1]


def assert_same_params(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ----------------------------------------------------------------------------- language model
def test_lm_quick_learns_beyond_unigram(capsys):
    """A few seconds of training on the 20k-word corpus: far below the unigram perplexity, not below the optimum."""
    r = lm.main(["--quick", "--log-every", "100"])
    out = capsys.readouterr().out
    assert r["test_ppl"] < 0.4 * r["unigram_ppl"], r
    assert r["test_ppl"] > 0.97 * r["optimal_ppl"], r  # no model beats the true one (up to sampling noise)
    assert r["epoch"] == 4 and r["steps"] == 3 * 199  # three epochs of 199 windows of 10 x 10 words
    for text in ("words/s", "valid ppl", "test perplexity", "corpus optimum", "gap"):
        assert text in out
    assert f"{r['test_ppl']:.2f}" in out


def test_lm_resume_equals_uninterrupted(tmp_path, capsys):
    """Stop mid-epoch (hidden state and dropout RNG in flight), resume across an epoch boundary: same bits."""
    base = [
        "--quick",
        "--batch-size",
        "20",
        "--num-steps",
        "10",
        "--hidden-size",
        "24",
        "--layers",
        "2",
        "--dropout",
        "0.3",
        "--epochs",
        "3",
        "--log-every",
        "1000",
    ]  # 99 steps per epoch
    first = lm.main(base + ["--max-steps", "80", "--save", str(tmp_path / "a.npz")])
    assert first["steps"] == 80
    resumed = lm.main(base + ["--max-steps", "130", "--resume", str(tmp_path / "a.npz")])
    straight = lm.main(base + ["--max-steps", "130"])
    assert resumed["steps"] == straight["steps"] == 130
    assert_same_params(resumed["params"], straight["params"])
    assert resumed["test_ppl"] == straight["test_ppl"]
    with pytest.raises(AssertionError):  # the check can fail: 80 steps are not 130
        assert_same_params(first["params"], straight["params"])
    with pytest.raises(SystemExit):  # same model shapes, another preset's schedule: one line (issue 32)
        lm.main(base[1:] + ["--preset", "demo", "--resume", str(tmp_path / "a.npz")])
    assert "--resume" in (err := capsys.readouterr().err) and "preset quick" in err and "Traceback" not in err


def test_lm_float64_and_lr_schedule(capsys):
    r = lm.main(["--quick", "--dtype", "float64", "--epochs", "3", "--max-steps", "5", "--log-every", "5"])
    assert all(v.dtype == np.float64 for k, v in r["params"].items())
    assert np.isfinite(r["test_ppl"])
    # Zaremba's schedule: lr for `decay_after` epochs, then multiplied by lr_decay each epoch.
    cfg = lm.PRESETS["quick"]
    assert [cfg.lr_at(e) for e in (1, 2, 3, 4)] == [cfg.lr, cfg.lr, cfg.lr * cfg.lr_decay, cfg.lr * cfg.lr_decay**2]


def test_lm_presets_match_zaremba():
    small, medium, large = (lm.PRESETS[k] for k in ("small", "medium", "large"))
    assert (small.hidden_size, small.num_layers, small.num_steps, small.batch_size) == (200, 2, 20, 20)
    assert (small.lr, small.lr_decay, small.decay_after, small.epochs) == (1.0, 0.5, 4, 13)
    assert (medium.hidden_size, medium.num_steps, medium.dropout, medium.epochs) == (650, 35, 0.5, 39)
    assert (large.hidden_size, large.dropout, large.max_grad_norm, large.epochs) == (1500, 0.65, 10.0, 55)


def write_ptb(directory: Path, rng: np.random.Generator) -> None:
    """Tiny PTB-format files: sentences from a 3-word cycle with noise, '<unk>' in the vocabulary."""
    words = ["the", "cat", "sat", "on", "mat", "<unk>"]
    for name, lines in (("train", 300), ("valid", 30), ("test", 30)):
        text = []
        for _ in range(lines):
            start = rng.integers(0, 5)
            text.append(" " + " ".join(words[(start + i) % 5] for i in range(rng.integers(3, 9))) + " ")
        text.append(" the cat <unk> on mat ")
        if name == "test":
            text.append(" the unseenword cat ")  # maps to <unk>
        (directory / f"ptb.{name}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")


def test_lm_reads_ptb_directory(tmp_path, capsys, rng):
    write_ptb(tmp_path, rng)
    r = lm.main(
        ["--data", str(tmp_path), "--preset", "quick", "--batch-size", "4", "--epochs", "2", "--log-every", "1000"]
    )
    out = capsys.readouterr().out
    assert "optimal_ppl" not in r and "corpus optimum" not in out
    assert r["test_ppl"] < 4.0  # the next word is nearly determined; uniform over 7 words would be 7


def test_lm_reads_text_file(tmp_path, capsys):
    f = tmp_path / "book.txt"
    f.write_text("\n".join("a b c d e f g h" for _ in range(400)), encoding="utf-8")
    r = lm.main(["--text", str(f), "--preset", "quick", "--batch-size", "4", "--epochs", "1", "--log-every", "1000"])
    assert np.isfinite(r["test_ppl"]) and r["test_ppl"] < 9  # 9 = vocabulary with <eos>
    assert "test perplexity" in capsys.readouterr().out


def test_lm_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:  # a usage error: one line before anything is built, status 2
        lm.main(["--data", str(tmp_path), "--quick"])
    assert exit_.value.code == 2 and "missing ptb.train.txt" in capsys.readouterr().err
    (tmp_path / "tiny.txt").write_text("one two\nthree\nfour five six\n" * 3)
    with pytest.raises(SystemExit) as exit_:  # a corpus too short for the streams: one line naming the flag
        lm.main(["--text", str(tmp_path / "tiny.txt"), "--quick", "--batch-size", "20"])
    assert exit_.value.code == 2 and "batch-size: " in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.build_parser(lm.LMTask).parse_args(["--preset", "huge"])
    with pytest.raises(SystemExit):
        cli.build_parser(lm.LMTask).parse_args(["--batch-size", "0"])


# ----------------------------------------------------------------------------- CNN
def test_cnn_quick_learns(capsys):
    """Seconds of training on 1,000 images: better than the best constant answer, in accuracy and in loss."""
    r = cnn.main(["--quick", "--log-every", "1000"])
    rate = float(np.mean(cnn.generated_images("quick").y_test))  # fraction of labels present (~0.4)
    majority = max(rate, 1 - rate)  # accuracy of always answering "absent"
    constant_loss = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))  # BCE of always predicting `rate`
    assert r["multilabel"] and r["accuracy"] > majority + 0.08, (r["accuracy"], majority)
    assert r["loss"] < 0.8 * constant_loss, (r["loss"], constant_loss)
    out = capsys.readouterr().out
    for text in ("images/s", "per-label accuracy", "exact match", "circle"):
        assert text in out


def test_cnn_resume_equals_uninterrupted(tmp_path):
    """Momentum, BatchNorm running statistics, the sampler's place and the LR schedule all resume exactly."""
    base = ["--quick", "--width", "4", "--batch-size", "50", "--epochs", "2", "--log-every", "1000"]  # 20 steps/epoch
    cnn.main(base + ["--max-steps", "13", "--save", str(tmp_path / "a.npz")])
    resumed = cnn.main(base + ["--max-steps", "27", "--resume", str(tmp_path / "a.npz")])
    straight = cnn.main(base + ["--max-steps", "27"])
    assert resumed["steps"] == straight["steps"] == 27
    assert_same_params(resumed["params"], straight["params"])
    assert resumed["accuracy"] == straight["accuracy"]


def test_cnn_single_label_idx(tmp_path, rng, capsys):
    """MNIST-format files: 10 classes, cross-entropy. Class c is a bright bar in row band c: learnable."""

    def make(n):
        y = rng.integers(0, 10, n)
        x = rng.integers(0, 40, (n, 28, 28))
        for i, c in enumerate(y):
            x[i, 2 + 2 * c : 4 + 2 * c, 4:24] = 255
        return x, y

    (xtr, ytr), (xte, yte) = make(600), make(200)
    save_idx(tmp_path / "train-images-idx3-ubyte.gz", xtr.astype(np.uint8))  # gzipped, as MNIST ships
    save_idx(tmp_path / "train-labels-idx1-ubyte.gz", ytr.astype(np.uint8))
    save_idx(tmp_path / "t10k-images-idx3-ubyte", xte.astype(np.uint8))
    save_idx(tmp_path / "t10k-labels-idx1-ubyte", yte.astype(np.uint8))
    r = cnn.main(["--data", str(tmp_path), "--quick", "--batch-size", "20", "--epochs", "2", "--log-every", "1000"])
    assert not r["multilabel"] and r["accuracy"] > 0.5, r["accuracy"]  # chance is 0.1
    assert "accuracy" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the command line
def test_dispatch_usage(capsys):
    assert train_main([]) == 2
    assert "usage" in capsys.readouterr().err
    assert train_main(["--help"]) == 0


MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
def test_parallel_data_error_is_one_line_for_the_job(tmp_path):
    """A corpus too short for 2 ranks x 20 streams under --parallel data: one line from rank 0 naming the flag, exit 2,
    never a hang (an uncaught error on one rank aborting the job is tests/test_ranks_disagree_cli.py's)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("one two\nthree\nfour five six\n" * 3)
    proc = subprocess.run(
        [
            MPIEXEC,
            "-n",
            "2",
            sys.executable,
            "-m",
            "minidl.train",
            "lm",
            "--parallel",
            "data",
            "--text",
            str(tiny),
            "--quick",
            "--batch-size",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert out.count("--batch-size: 20 streams x 2 ranks is more than the training split") == 1, out
    assert "Traceback" not in out and "aborting" not in out, out


def test_python_dash_m_runs():
    """The real entry point, as a user types it (tiny run)."""
    out = subprocess.run(
        [sys.executable, "-m", "minidl.train", "lm", "--quick", "--max-steps", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "test perplexity" in out.stdout


# ----------------------------------------------------------------------------- logs and settings
def read_json_lines(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lm_log_json_has_a_record_per_progress_line_and_evaluation(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    flags = ["--quick", "--batch-size", "50", "--epochs", "2", "--max-steps", "60", "--log-every", "20"]
    r = lm.main([*flags, "--log-json", str(path)])  # 39 windows per epoch: one evaluation, then a mid-epoch stop
    out = capsys.readouterr().out
    records = read_json_lines(path)
    train = [x for x in records if x["kind"] == "train"]
    evals = [x for x in records if x["kind"] == "eval"]
    assert records[0]["kind"] == "machine" and [x["kind"] for x in records].count("machine") == 1
    assert [(x["step"], x["epoch"]) for x in train] == [(20, 1), (40, 2), (60, 2)]  # every 20th step
    for x in train:
        assert {"step", "epoch", "loss", "ppl", "lr", "words_per_s", "comp_s", "wait_s", "comm_s"} <= set(x)
        assert x["ppl"] == pytest.approx(np.exp(x["loss"])) and x["words_per_s"] > 0 and x["comp_s"] is None
        assert f"loss {x['loss']:.3f} | ppl {x['ppl']:.2f}" in out  # the same numbers as the printed lines
    assert [(x["split"], x["epoch"]) for x in evals] == [("valid", 1), ("test", 2)]
    assert evals[0]["ppl"] == pytest.approx(r["history"]["valid"][0][1])
    assert evals[-1]["ppl"] == pytest.approx(r["test_ppl"]) and [x["lr"] for x in train] == [5.0] * 3


def test_cnn_log_json_records_accuracy(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    r = cnn.main(["--quick", "--width", "2", "--max-steps", "6", "--log-every", "3", "--log-json", str(path)])
    capsys.readouterr()
    machine, *train, test = read_json_lines(path)
    assert machine["kind"] == "machine" and machine["numpy"] == np.__version__ and machine["sgemm"]["gflops"] > 0
    assert machine["blas"][0]["architecture"] and "warnings" in machine  # the kernel the speeds below ran on
    assert [x["step"] for x in train] == [3, 6] and all(
        0 <= x["accuracy"] <= 1 and x["images_per_s"] > 0 for x in train
    )
    assert test["kind"] == "eval" and test["accuracy"] == pytest.approx(r["accuracy"])


def test_print_config_prints_the_preset_with_the_flags_and_trains_nothing(capsys):
    import json

    settings = lm.main(["--quick", "--lr", "2.5", "--layers", "2", "--print-config"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(settings))
    want = lm.PRESETS["quick"].with_(lr=2.5, num_layers=2, vocab_size=755).as_dict()  # the quick corpus's words
    assert printed["preset"] == "quick" and printed["config"] == want and "params" not in settings
    done = subprocess.run(
        [sys.executable, "-m", "minidl.train", "cnn", "--preset", "resnet20", "--depth", "14", "--print-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    cfg = json.loads(done.stdout)["config"]
    assert cfg == {**cnn.PRESETS["resnet20"].as_dict(), "depth": 14}
