"""python -m minidl.simulate's weak cases of the reliability sweep (issue 32, part 4): non-finite or overflowing
numbers (--oversubscription inf or 1e300, --core-speed inf gave NaN rows, a 300-digit step time or a
ZeroDivisionError) and a scheme's or a topology's flag given where it does nothing (ignored in silence) are one
line naming the flag, exit 2."""

from __future__ import annotations

import json
import math

import pytest

from minidl.simulate.cli import main

DESCRIBED = ["lm", "--profile", "params=1e6,rate=1000,batch=64", "--nodes", "1,64", "--network", "10gbe"]
FATTREE = ["--topology", "fattree", "--leaf-size", "8"]


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and not out, err
    assert lines[0].startswith("python -m minidl.simulate: error: ")
    return lines[0].removeprefix("python -m minidl.simulate: error: ")


@pytest.mark.parametrize(
    "flags, message",
    [
        ([*FATTREE, "--oversubscription", "inf"], "--oversubscription: 'inf' is not a finite number"),
        ([*FATTREE, "--oversubscription", "1e300"], "--oversubscription: 1e+300 is outside 1e-06 .. 1e+06"),
        (["--core-speed", "inf"], "--core-speed: 'inf' is not a finite number"),
        (["--core-speed", "nan"], "--core-speed: 'nan' is not a positive number"),
        (["--core-speed", "1e300"], "--core-speed: 1e+300 is outside 1e-06 .. 1e+06"),
        (["--sharing", "1e-300", "--ranks-per-node", "4", "--cores-per-node", "2"], "--sharing: 1e-300 is outside"),
        (["--efficiency", "1e-300"], "--efficiency: 1e-300 is outside 1e-06 .. 1"),
        (["--link-latency", "1e300"], "--link-latency: 1e+300 is outside 0 .. 1 (seconds per link)"),
        (["--fusion-mb", "inf"], "--fusion-mb: inf is not a positive number of MiB"),
        (["--jitter", "inf"], "--jitter: 'inf' is not a finite number"),
        (["--straggler", "0.1:inf"], "--straggler: 'inf' is not a finite number"),
    ],
)
def test_non_finite_and_overflowing_numbers_are_refused(capsys, flags, message):
    assert one_line_error(capsys, [*DESCRIBED, *flags]).startswith(message)


@pytest.mark.parametrize("description", ["params=inf,rate=1000,batch=64", "params=1e6,rate=inf,batch=64"])
def test_a_described_profile_of_infinite_size_or_speed_is_refused(capsys, description):
    error = one_line_error(capsys, ["lm", "--profile", description, "--nodes", "1,4"])
    assert error.startswith("--profile: a described profile needs positive finite params, rate and batch")


def test_the_largest_accepted_values_give_finite_rows(capsys):
    """The bounds keep every number of every row finite (the rows the refused values broke)."""
    flags = [*FATTREE, "--oversubscription", "1e6", "--core-speed", "1e6", "--link-latency", "1", "--json"]
    assert main([*DESCRIBED, *flags]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2
    assert all(math.isfinite(v) and v > 0 for r in rows for k, v in r.items() if k in ("rate", "step_s", "speedup"))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--servers", "4"], "--servers applies only to --parallel ps/ps-async, not to --parallel data"),
        (["--local-steps", "4"], "--local-steps applies only to --parallel local-sgd, not to --parallel data"),
        (["--microbatches", "4"], "--microbatches applies only to --parallel pipeline, not to --parallel data"),
        (["--schedule", "gpipe"], "--schedule applies only to --parallel pipeline, not to --parallel data"),
        (["--parallel", "data,local-sgd", "--servers", "4"], "--servers applies only to --parallel ps/ps-async"),
    ],
)
def test_a_scheme_flag_without_its_scheme_is_refused(capsys, flags, message):
    assert one_line_error(capsys, [*DESCRIBED, *flags]).startswith(message)


def test_a_scheme_flag_with_its_scheme_is_used(capsys):
    assert main([*DESCRIBED, "--parallel", "data,ps", "--servers", "3"]) == 0
    assert "ps: 3 server node(s) beside the workers" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--leaf-size", "8"], "takes no option 'leaf_size'"),
        (["--oversubscription", "2"], "takes no option 'oversubscription'"),
        (["--dims", "8x8"], "takes no option 'dims'"),
        (["--topology", "torus2d", "--dims", "8x8", "--leaf-size", "8"], "'torus2d' takes no option 'leaf_size'"),
        (["--topology", "fattree", "--dims", "8x8"], "'fattree' takes no option 'dims'"),
    ],
)
def test_a_topology_flag_without_its_topology_is_refused(capsys, flags, words):
    assert words in one_line_error(capsys, [*DESCRIBED, *flags])
