"""minidl.viz (the autograd graph: dot text, graphviz, matplotlib) and collectives.diagram (space-time diagrams)."""

import re
import shutil
import sys

import numpy as np
import pytest

import collectives
import minidl
from collectives.diagram import spacetime
from minidl.tools import viz


def _small_graph():
    """(x @ w + b).relu().sum() with x [4, 3] a constant, w [3, 2] and b [2] requiring grad, all float64."""
    rng = np.random.default_rng(0)
    x = minidl.tensor(rng.standard_normal((4, 3)), name="x")
    w = minidl.tensor(rng.standard_normal((3, 2)), requires_grad=True, name="w")
    b = minidl.tensor(rng.standard_normal(2), requires_grad=True, name="b")
    return (x @ w + b).relu().sum()


def _nodes(dot: str) -> dict[str, str]:
    """node id -> its label (with dot's \\n as a newline) and its attributes."""
    return {
        m[1]: m[2].replace("\\n", "\n") + m[3] for m in re.finditer(r'^  (n\d+) \[label="(.*?)"(.*)\];$', dot, re.M)
    }


def test_dot_names_every_op_once_with_its_shape_and_every_leaf():
    dot = viz.to_dot(_small_graph())
    nodes = _nodes(dot)
    ops = {"MatMul": "[4, 2] float64", "Add": "[4, 2] float64", "ReLU": "[4, 2] float64", "Sum": "scalar float64"}
    for op, shape in ops.items():
        found = [label for label in nodes.values() if label.split("\n")[0] == op]
        assert len(found) == 1, (op, dot)
        assert found[0].split("\n")[1].startswith(shape), found
        assert "shape=box" in found[0]
    leaves = {"x": "[4, 3] float64", "w": "[3, 2] float64", "b": "[2] float64"}
    for name, shape in leaves.items():
        (label,) = [label for label in nodes.values() if label.split("\n")[0] == name]
        assert label.split("\n")[1].startswith(shape) and "ellipse" in label
        assert ("dashed" in label) == (name == "x")  # the constant is drawn apart from the leaves requiring grad
    assert len(nodes) == 7
    edges = re.findall(r"^  (n\d+) -> (n\d+)", dot, re.M)
    first = {label.split("\n")[0]: node for node, label in nodes.items()}
    expected = [("x", "MatMul"), ("w", "MatMul"), ("MatMul", "Add"), ("b", "Add"), ("Add", "ReLU"), ("ReLU", "Sum")]
    assert sorted(edges) == sorted((first[a], first[b]) for a, b in expected)
    assert "penwidth=2" in nodes[first["Sum"]]  # the tensor drawn is marked


def test_dot_names_intermediate_tensors_and_counts_what_it_leaves_out():
    t = minidl.tensor(1.0, requires_grad=True, name="t")
    h = t * 2.0
    h.name = "h"
    y = h
    for _ in range(30):
        y = y + 1.0
    assert "h = Mul" in viz.to_dot(h)
    nodes = _nodes(viz.to_dot(y, max_nodes=10))
    assert len(nodes) == 11  # 10 nodes and the box that counts the rest: 30 Adds, 31 constants, Mul, t
    assert any(label.startswith("53 more nodes") for label in nodes.values())


def test_graph_writes_the_dot_text_and_rejects_unknown_formats(tmp_path):
    y = _small_graph()
    pic = viz.graph(y, tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text() == viz.to_dot(y) and pic.format == "dot"
    with pytest.raises(ValueError, match="format 'gif'"):
        viz.graph(y, tmp_path / "g.gif")
    with pytest.raises(TypeError, match="minidl Tensor"):
        viz.to_dot(np.ones(3))


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's `dot` program is not on PATH")
def test_graph_renders_with_dot(tmp_path):
    pic = viz.graph(_small_graph(), tmp_path / "g.svg", engine="dot")
    svg = (tmp_path / "g.svg").read_text()
    assert pic.engine == "dot" and "<svg" in svg and "MatMul" in svg


def test_graph_draws_with_matplotlib_one_box_per_node(tmp_path):
    pytest.importorskip("matplotlib", reason="the drawing without graphviz needs matplotlib")
    y = _small_graph()
    fig = viz.figure(y)
    ax = fig.axes[0]
    assert sorted(t.get_text().split("\n")[0] for t in ax.texts) == ["Add", "MatMul", "ReLU", "Sum", "b", "w", "x"]
    assert len(ax.patches) == 6  # one arrow per edge
    pic = viz.graph(y, tmp_path / "g.png", engine="matplotlib")
    data = (tmp_path / "g.png").read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000 and pic.data == data and pic._repr_png_() == data


def test_spacetime_draws_one_arrow_per_message(tmp_path):
    pytest.importorskip("matplotlib", reason="the space-time diagram needs matplotlib")
    from matplotlib.patches import FancyArrowPatch

    res = collectives.simulate(4, lambda comm: collectives.ring.allreduce(comm, np.arange(8.0), np.add))
    assert len(res.messages) == 2 * 3 * 4  # the ring: 2(p - 1) messages from each of the p ranks
    labels = [f"{m.source}->{m.dest}" for m in res.messages]
    fig = spacetime(res.messages, 4, tmp_path / "ring.png", labels=labels, title="ring", highlight={2})
    ax = fig.axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == len(res.messages)
    assert {(a._posA_posB[0], a._posA_posB[1]) for a in arrows} == {
        ((m.step, m.source), (m.arrival, m.dest)) for m in res.messages
    }
    assert sorted(t.get_text() for t in ax.texts) == sorted(labels)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["reduce-scatter", "allgather", "highlighted"]
    assert ax.get_yticklabels()[2].get_color() != ax.get_yticklabels()[1].get_color()
    data = (tmp_path / "ring.png").read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_spacetime_rejects_bad_input():
    pytest.importorskip("matplotlib", reason="the space-time diagram needs matplotlib")
    res = collectives.simulate(2, lambda comm: collectives.ring.allreduce(comm, np.arange(4.0), np.add))
    with pytest.raises(ValueError, match="3 labels for 4 messages"):
        spacetime(res.messages, 2, labels=["a", "b", "c"])
    with pytest.raises(ValueError, match="outside 0..0"):
        spacetime(res.messages, 1)
    with pytest.raises(ValueError, match="highlight names ranks"):
        spacetime(res.messages, 2, highlight={5})


def test_without_matplotlib_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)  # an import of it now fails
    res = collectives.simulate(2, lambda comm: collectives.ring.allreduce(comm, np.arange(4.0), np.add))
    with pytest.raises(ImportError, match="pip install matplotlib"):
        spacetime(res.messages, 2)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        viz.graph(_small_graph(), engine="matplotlib")
