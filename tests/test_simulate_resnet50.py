"""python -m minidl.simulate cnn --model resnet50: a profile measured from minidl's own ResNet-50 here, held to
closed forms (its gradient bytes from torchvision's layout, its step on a crossbar from the cost model)."""

from __future__ import annotations

import json

import pytest

from collectives import cost
from minidl.data.images import SHAPE_CLASSES
from minidl.simulate import Cluster, Profile, allreduce_time, simulate_step
from minidl.simulate.cli import main
from minidl.simulate.step import STEP_SYNCS


def resnet50_parameters(classes: int, channels: int) -> int:
    """torchvision's ResNet-50: 25,557,032 parameters at 1000 classes and 3 channels; the stem's 7x7 conv has
    64 x 49 per input channel, fc 2048 + 1 per class; the rest, 23,498,624, depends on neither."""
    return 23_498_624 + 64 * 49 * channels + 2049 * classes


def test_closed_form_parameter_count():
    assert resnet50_parameters(1000, 3) == 25_557_032


def test_measured_resnet50_profile_against_closed_forms(tmp_path, capsys):
    path = tmp_path / "r50.json"
    argv = ["cnn", "--model", "resnet50", "--image", "32", "--batch-size", "2", "--profile-steps", "1"]
    argv += ["--fusion-mb", "16", "--nodes", "1,4", "--network", "crossbar", "--json", "--save-profile", str(path)]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    prof = Profile.load(path)
    assert prof.unit == "images" and prof.items == 2 and "ResNet-50 (torchvision)" in prof.task
    assert prof.layers == 50 and prof.activation_bytes == 2 * 64 * 16 * 16 * 4  # the stem's 64 x 16 x 16 maps
    # DistributedOptimizer's fusion plan: float32 gradients and one 4-byte presence flag per parameter (161)
    n = resnet50_parameters(len(SHAPE_CLASSES), 1)
    assert prof.gradient_bytes == 4 * n + 4 * 161
    assert all(b.nbytes <= 16 * 2**20 for b in prof.buckets)  # no parameter is larger (9 MiB: 512 x 512 x 3 x 3)
    assert len(prof.buckets) >= -(-prof.gradient_bytes // (16 * 2**20))
    assert all(0 <= b.ready_s <= prof.backward_s for b in prof.buckets)
    # one node: the measured compute alone; four on a crossbar: plus each bucket's ring allreduce (cost.py's
    # closed form), its pack time and the step's agreements
    compute = prof.forward_s + prof.backward_s + prof.update_s
    assert rows[0]["step_s"] == pytest.approx(compute, rel=1e-9) and rows[0]["rate"] == pytest.approx(2 / compute)
    params = cost.get_params()  # the crossbar's, without --params
    comm = sum(b.pack_s + cost.predict("ring", 4, b.nbytes, params) for b in prof.buckets)
    comm += sum(allreduce_time(a, 4, m, "crossbar", params) for calls in STEP_SYNCS.values() for a, m in calls)
    # to 1e-6: the closed form splits n bytes into 4 equal blocks, the simulated ring into whole float32s
    assert rows[1]["step_s"] == pytest.approx(compute + comm, rel=1e-6)
    assert rows[1]["rate"] == pytest.approx(4 * 2 / (compute + comm), rel=1e-6)
    assert simulate_step(prof, Cluster(4, "crossbar", params=params)).step_s == pytest.approx(rows[1]["step_s"])


def test_model_flags_are_checked(capsys):
    assert main(["cnn", "--model", "resnet51", "--nodes", "1"]) == 2
    assert "--model 'resnet51'" in capsys.readouterr().err
    assert main(["cnn", "--model", "resnet50", "--image", "16", "--nodes", "1"]) == 2
    assert "--image 16" in capsys.readouterr().err
    assert main(["lm", "--model", "resnet50", "--nodes", "1"]) == 2
    assert "only to the CNN" in capsys.readouterr().err
