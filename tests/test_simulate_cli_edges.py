"""The simulator's command line at its edges (issue 27): a torus of --dims AxB on A*B nodes runs, bad values of
--efficiency, --fusion-mb, --num-steps, --batch-size are one line naming the flag, and a huge --nodes is refused
with an estimate (of memory, or of time) instead of running for minutes or ending in a MemoryError."""

import json

import pytest

from minidl.simulate import cli
from minidl.simulate.cli import main

DESCRIBED = ["--profile", "params=1e6,rate=100,batch=64"]


def one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_torus_runs_on_the_nodes_its_dims_hold(capsys):
    assert main(["lm", *DESCRIBED, "--topology", "torus2d", "--dims", "4x4", "--nodes", "1,16", "--json"]) == 0
    assert capsys.readouterr().out.count('"nodes": 16') == 1
    err = one_line_error(capsys, ["lm", *DESCRIBED, "--topology", "torus2d", "--dims", "4x4", "--nodes", "8,16"])
    assert "--nodes 8: --dims (4, 4) holds 16 nodes (give --nodes 16)" in err


def test_sharing_slows_only_ranks_beyond_the_cores(capsys):
    rows = {}
    for sharing in ("1", "0.5"):
        flags = ["--ranks-per-node", "4", "--cores-per-node", "2", "--sharing", sharing, "--nodes", "1", "--json"]
        assert main(["lm", *DESCRIBED, *flags]) == 0
        rows[sharing] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rows["0.5"]["compute_s"] == pytest.approx(2 * rows["1"]["compute_s"])


@pytest.mark.parametrize(
    "flag,value,words",
    [
        ("--efficiency", "2", "--efficiency: 2 is above 1"),
        ("--sharing", "1.5", "--sharing: 1.5 is above 1"),
        ("--sharing", "0", "--sharing: '0' is not a positive number"),
        ("--fusion-mb", "-1", "--fusion-mb: -1.0 is not a positive number"),
        ("--num-steps", "0", "--num-steps: 0 is not a positive integer"),
        ("--batch-size", "-3", "--batch-size: -3 is not a positive integer"),
        ("--hidden-size", "0", "--hidden-size: 0 is not a positive integer"),
    ],
)
def test_bad_values_name_the_flag(capsys, flag, value, words):
    assert words in one_line_error(capsys, ["lm", "--preset", "quick", flag, value, "--nodes", "1,2"])


@pytest.mark.parametrize(
    "nodes,algorithm,words",
    [
        ("1000000000", "tree", "--nodes 1000000000: tree on 1000000000 ranks needs about 1117.6 GiB of traces"),
        ("1000000", "tree", "--nodes 1000000: about 3000 s of simulation here (the longest part: tree on 1000000"),
        ("100000000", "ring", "--nodes 100000000: about 600009994 s of simulation here (the longest part: ring on"),
    ],
)
def test_huge_node_counts_are_refused_with_an_estimate(capsys, nodes, algorithm, words):
    assert words in one_line_error(capsys, ["lm", *DESCRIBED, "--nodes", nodes, "--allreduce", algorithm])


@pytest.mark.parametrize("algorithm,ranks", [("ring", 1), ("hierarchical", 8), ("hierarchical_rs", 8)])
def test_what_runs_by_rounds_in_seconds_is_not_refused(algorithm, ranks):
    """Issue 35: a ring on 4,096 nodes (1.1 s by rounds) was refused as 671 s of traces, and 1,024 nodes of 8 ranks
    as 75 GiB of them; the estimate now comes from the engine that will run (replay.simulation_estimate)."""
    nodes = 4096 // ranks
    seconds, memory = cli.simulation_estimate(algorithm, nodes * ranks, 4_000_000, ranks, limit=cli.MAX_SECONDS)
    assert seconds < 10 and memory < 2**20  # by rounds: no trace of every rank (the leaders' tree: one node's)
    cli.check_size([1, nodes], [algorithm], 1, cli.NodeSpec(ranks), [4_000_000, 8])


def test_a_long_simulation_is_announced(capsys, monkeypatch):
    monkeypatch.setattr(cli, "TELL_SECONDS", 0.1)  # as a run of minutes would be, at the size of a test
    assert main(["lm", *DESCRIBED, "--nodes", "64", "--allreduce", "tree", "--json"]) == 0
    assert "about 0.2 s of simulation here (the longest part: tree on 64 ranks)" in capsys.readouterr().err
