"""--lr-scaling linear and --warmup-epochs K (Goyal et al., "Accurate, Large Minibatch SGD", 2017)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from minidl.optim.large_batch import scale_factor, warmup_ramp
from minidl.train import lm
from minidl.train.checks import UsageError, check_args


def test_linear_rule_scales_by_global_over_base_batch():
    cfg = lm.PRESETS["quick"]  # batch 10 per rank
    on = argparse.Namespace(lr_scaling="linear", base_batch=None)
    assert scale_factor(on, cfg, 8, 10) == 8.0  # 8 ranks x 10 over the preset's 10
    assert scale_factor(argparse.Namespace(lr_scaling="linear", base_batch=40), cfg, 8, 10) == 2.0
    assert scale_factor(argparse.Namespace(lr_scaling="none", base_batch=None), cfg, 8, 10) == 1.0


def test_warmup_ramps_from_the_small_batch_rate_to_the_scaled_one():
    k, w = 8.0, 100
    assert warmup_ramp(0, w, k) == pytest.approx(1 / k)  # k * lr * ramp(0) = lr: the small-batch rate
    assert warmup_ramp(50, w, k) == pytest.approx((1 / k + 1) / 2)
    assert warmup_ramp(100, w, k) == warmup_ramp(5000, w, k) == 1.0
    assert warmup_ramp(0, w, 1.0) == pytest.approx(0.1) and warmup_ramp(7, 0, 8.0) == 1.0


def test_lm_trains_at_the_scaled_warmed_up_rate(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    flags = ["--quick", "--max-steps", "6", "--log-every", "2", "--log-json", str(path)]
    lm.main([*flags, "--batch-size", "20", "--lr-scaling", "linear", "--warmup-epochs", "0.5"])
    spe = int(re.search(r"(\d+) steps/epoch", capsys.readouterr().out).group(1))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    train = [r for r in rows if r.get("kind") == "train"]
    k, lr = 2.0, lm.PRESETS["quick"].lr  # 20 streams over the preset's 10; the preset's rate for epoch 1
    for r in train:
        t = r["step"] - 1  # the rate in force for the record's last step
        assert r["lr"] == pytest.approx(k * lr * warmup_ramp(t, round(0.5 * spe), k), rel=1e-6)
    assert train[0]["lr"] < k * lr


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(parallel="ps", lr_scaling="linear"), "--lr-scaling applies only to --parallel none/data/zero"),
        (dict(base_batch=64), "--base-batch needs --lr-scaling linear"),
        (dict(warmup_epochs=-1.0), "--warmup-epochs must be a finite number >= 0"),
    ],
)
def test_bad_large_batch_flags_are_named(kw, message):
    base = dict(text=None, parallel="none", lr=None, fusion_mb=64.0, allreduce="ring", compression="none")
    with pytest.raises(UsageError, match=message):
        check_args(argparse.Namespace(**(base | kw)))
