"""Pictures: the autograd graph that made a tensor, and (re-exported) the space-time diagram of a simulated run.

    loss = (x @ w + b).relu().sum()
    minidl.tools.viz.graph(loss, "graph.svg")       # graphviz's dot when it is on PATH, else matplotlib
    print(minidl.tools.viz.to_dot(loss))            # the dot text itself, always available
    minidl.tools.viz.spacetime(res.messages, 4, "ring.png")   # collectives.diagram.spacetime

The graph is read from the tape autograd keeps (minidl/autograd.py): each op's output holds the Function that
made it (``_ctx``) and each Function its inputs (``parents``). Ops are boxes with their output's shape and dtype,
named after the tensor when it has a name; leaves are ellipses, green for those that require grad (parameters,
inputs being differentiated), white and dashed for constants. Edges run from an input to the op that used it,
inputs at the top and the tensor drawn at the bottom, in a bold box. Only the ``max_nodes`` nodes nearest the
tensor are drawn; one dashed box counts the rest.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectives.diagram import spacetime
from minidl.tensor import Tensor

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Picture", "figure", "graph", "spacetime", "to_dot"]

FORMATS = ("png", "svg", "pdf", "dot")
STYLE = {  # kind: (dot attributes, matplotlib box: face colour, edge colour, line style)
    "op": ('shape=box, style="rounded,filled", fillcolor="#dbe8f6"', ("#dbe8f6", "#3b6ea5", "-")),
    "param": ('shape=ellipse, style=filled, fillcolor="#cde9c4"', ("#cde9c4", "#3d8b2f", "-")),
    "const": ("shape=ellipse, style=dashed, fontcolor=gray30", ("white", "0.45", "--")),
    "more": ("shape=box, style=dashed, fontcolor=gray30", ("white", "0.45", "--")),
}
LEGEND = {"op": "op (output shape, dtype)", "param": "leaf that requires grad", "const": "constant / input"}


@dataclass
class _Graph:
    """What is drawn: nodes by key (id of a Function or leaf Tensor), in breadth-first order from the root."""

    kinds: dict[int, str] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)
    edges: list[tuple[int, int, str]] = field(default_factory=list)  # (input, op, output index of a multi-output op)
    root: int = 0


def _shape(shape: tuple[int, ...], dtype: Any) -> str:
    return f"{list(shape) if shape else 'scalar'} {dtype}"


def _leaf_label(t: Tensor, names: Mapping[int, str]) -> str:
    title = names.get(id(t)) or t.name
    if not title:
        title = "parameter" if t.requires_grad else "input"
        if t.size == 1 and not t.requires_grad:
            title = f"const {t.item():.4g}"
    return f"{title}\n{_shape(t.shape, t.dtype)}"


def _op_label(fn: Any, out_names: Mapping[int, str]) -> str:
    """'h = MatMul' and one line per output shape (three at most)."""
    title = type(fn).__name__
    named = [out_names[i] for i in range(fn.n_outputs) if i in out_names]
    if named:
        title = f"{', '.join(named)} = {title}"
    shapes = [_shape(s, d) for s, d in fn.out_meta]
    if len(set(shapes)) == 1 and len(shapes) > 1:
        shapes = [f"{len(shapes)} × {shapes[0]}"]
    return "\n".join([title] + shapes[:3] + (["..."] if len(shapes) > 3 else []))


def _collect(tensor: Tensor, max_nodes: int, params: Mapping[str, Tensor] | None) -> _Graph:
    """Walk the tape breadth first from ``tensor``; keep the first ``max_nodes`` nodes met, count the rest."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"viz: expected a minidl Tensor, got {type(tensor).__name__}")
    if max_nodes < 1:
        raise ValueError(f"viz: max_nodes must be at least 1, got {max_nodes}")
    names = {id(t): n for n, t in (params or {}).items()}
    g = _Graph(root=id(tensor._ctx or tensor))
    if tensor._ctx is None:
        g.kinds[g.root], g.labels[g.root] = "param" if tensor.requires_grad else "const", _leaf_label(tensor, names)
        return g
    out_names: dict[int, dict[int, str]] = defaultdict(dict)  # id(Function) -> {output index: tensor name}
    if tensor.name:
        out_names[g.root][tensor._out_index] = tensor.name
    fns, seen, hidden_into = {g.root: tensor._ctx}, {g.root}, set()
    queue = deque([tensor._ctx])
    while queue:
        fn = queue.popleft()
        for p in fn.parents:
            src = p._ctx
            key = id(src if src is not None else p)
            if src is not None and p.name:
                out_names[key][p._out_index] = p.name
            if key not in seen:
                seen.add(key)
                if len(g.kinds) + 1 < max_nodes:  # the root and the first met: each has its consumer shown
                    g.kinds[key] = "op" if src is not None else "param" if p.requires_grad else "const"
                    g.labels[key] = "" if src is not None else _leaf_label(p, names)
                if src is not None:
                    fns[key] = src
                    queue.append(src)
            if id(fn) in g.kinds or id(fn) == g.root:
                if key in g.kinds or key == g.root:
                    g.edges.append((key, id(fn), str(p._out_index) if src is not None and src.n_outputs > 1 else ""))
                else:
                    hidden_into.add(id(fn))
    return _finish(g, fns, out_names, len(seen) - len(g.kinds) - 1, hidden_into, max_nodes)


def _finish(g: _Graph, fns: dict, out_names: dict, hidden: int, hidden_into: set[int], max_nodes: int) -> _Graph:
    """Label the ops (their outputs' names are known only once the walk is over) and add the box of the rest."""
    g.kinds = {g.root: "op", **g.kinds}
    for key, kind in g.kinds.items():
        if kind == "op":
            g.labels[key] = _op_label(fns[key], out_names.get(key, {}))
    if hidden:
        g.kinds[-1], g.labels[-1] = "more", f"{hidden} more nodes\n(max_nodes={max_nodes})"
        g.edges += [(-1, key, "") for key in g.kinds if key in hidden_into]
    return g


def to_dot(tensor: Tensor, max_nodes: int = 50, params: Mapping[str, Tensor] | None = None) -> str:
    """The graph that produced ``tensor`` in graphviz's dot language (render: ``dot -Tsvg``).

    ``params`` (e.g. ``dict(model.named_parameters())``) names the leaves that are a module's parameters.
    """
    g = _collect(tensor, max_nodes, params)
    ids = {key: f"n{i}" for i, key in enumerate(g.kinds)}
    lines = ["digraph autograd {", '  node [fontname="Helvetica", fontsize=10];', "  edge [color=gray35];"]
    for key, kind in g.kinds.items():
        label = g.labels[key].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        bold = ", penwidth=2" if key == g.root else ""
        lines.append(f'  {ids[key]} [label="{label}", {STYLE[kind][0]}{bold}];')
    for src, dst, label in g.edges:
        lines.append(f"  {ids[src]} -> {ids[dst]}" + (f' [label="{label}", fontsize=8];' if label else ";"))
    return "\n".join(lines + ["}"]) + "\n"


def _layers(g: _Graph) -> dict[int, int]:
    """Each node's layer: the longest path from it to the root (the root is layer 0, every edge goes down)."""
    consumers, inputs = defaultdict(list), defaultdict(list)
    for src, dst, _ in g.edges:
        consumers[src].append(dst)
        inputs[dst].append(src)
    waiting = {key: len(consumers[key]) for key in g.kinds}
    layer = {key: 0 for key in g.kinds}
    ready = deque(key for key, n in waiting.items() if n == 0)
    while ready:  # Kahn's algorithm, from the root up: a node is placed once all its consumers are
        key = ready.popleft()
        for src in inputs[key]:
            layer[src] = max(layer[src], layer[key] + 1)
            waiting[src] -= 1
            if waiting[src] == 0:
                ready.append(src)
    return layer


def _positions(g: _Graph, layer: dict[int, int]) -> dict[int, tuple[float, float]]:
    """x in node widths, y = layer. A layer's nodes sit under the mean x of their consumers (placed before
    them, one layer down), pushed apart to one width, then the layer is shifted so that its ops (else all its
    nodes) are, on average, where they want to be: a chain of ops stays straight, leaves go to its sides."""
    consumers = defaultdict(list)
    for src, dst, _ in g.edges:
        consumers[src].append(dst)
    pos: dict[int, tuple[float, float]] = {}
    for k in range(max(layer.values()) + 1):
        row = [key for key in g.kinds if layer[key] == k]
        want = [sum(pos[c][0] for c in consumers[key]) / len(consumers[key]) if consumers[key] else 0.0 for key in row]
        order = sorted(range(len(row)), key=lambda i: want[i])
        xs: list[float] = []
        for i in order:
            xs.append(want[i] if not xs else max(want[i], xs[-1] + 1.0))
        anchor = [j for j, i in enumerate(order) if g.kinds[row[i]] == "op"] or range(len(xs))  # ops stay put
        shift = sum(want[order[j]] - xs[j] for j in anchor) / len(anchor)
        for i, x in zip(order, xs):
            pos[row[i]] = (x + shift, float(k))
    return pos


def figure(tensor: Tensor, max_nodes: int = 50, params: Mapping[str, Tensor] | None = None) -> Figure:
    """The graph of ``tensor`` drawn with matplotlib alone: a layered layout, inputs at the top.

    Returns the Figure; its one text box per node is in ``fig.axes[0].texts``, its one arrow per edge in
    ``fig.axes[0].patches``.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("minidl.viz draws without graphviz only with matplotlib: pip install matplotlib") from None
    g = _collect(tensor, max_nodes, params)
    pos = _positions(g, _layers(g))
    font, col_in, row_in = 8.0, _text_width(g.labels.values(), 8.0) + 0.35, 0.85
    xs, ys = [x for x, _ in pos.values()], [y for _, y in pos.values()]
    span_x, span_y = max(xs) - min(xs) + 1.4, max(ys) + 1.3  # in node widths and layers, margins included
    width = max(4.0, span_x * col_in)
    kinds = [kind for kind in LEGEND if kind in g.kinds.values()]
    columns = max(1, min(len(kinds), int(width // 1.9)))
    top = 0.2 * -(-len(kinds) // columns) + 0.15  # inches above the graph for the legend
    fig = Figure(figsize=(width, span_y * row_in + top))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, span_y * row_in / (span_y * row_in + top)))
    ax.set(xlim=(min(xs) - 0.7, max(xs) + 0.7), ylim=(-0.65, max(ys) + 0.65))
    ax.axis("off")
    for key, (x, y) in pos.items():
        face, edge, style = STYLE[g.kinds[key]][1]
        box = "round,pad=0.35" if g.kinds[key] in ("op", "more") else "ellipse,pad=0.25"
        frame = dict(boxstyle=box, fc=face, ec=edge, ls=style, lw=2.0 if key == g.root else 0.9)
        ax.text(x, y, g.labels[key], ha="center", va="center", fontsize=font, zorder=3, bbox=frame)
    _edges(ax, g, pos, (col_in, row_in), font)
    _graph_legend(fig, kinds, columns)
    return fig


def _text_width(labels: Any, font: float) -> float:
    """Inches taken by the widest line of any label (DejaVu Sans: about 0.62 em a character)."""
    return max(len(line) for label in labels for line in label.split("\n")) * font * 0.62 / 72


def _edges(ax: Any, g: _Graph, pos: dict[int, tuple[float, float]], inch: tuple[float, float], font: float) -> None:
    """An arrow from the bottom of each input's box to the top of its op's. ``inch``: inches per x and y unit."""
    from matplotlib.patches import FancyArrowPatch

    line = font * 1.2 / 72 / inch[1]  # a line of text, in y units

    def half(key: int) -> float:  # half the height of a node's box
        return (g.labels[key].count("\n") + 1) * line / 2 + 0.45 * font / 72 / inch[1]

    repeats: dict[tuple[int, int], int] = defaultdict(int)
    for src, dst, label in g.edges:
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        k = repeats[src, dst]
        repeats[src, dst] += 1  # x * x: the second edge between the same two nodes bends
        (xa, ya), (xb, yb) = start, end = (x0, y0 - half(src)), (x1, y1 + half(dst))
        bend = dict(connectionstyle=f"arc3,rad={0.3 * k}", shrinkA=0, shrinkB=0)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color="0.35", lw=0.9, **bend))
        if label:  # beside the curve's middle: arc3 pulls it rad * length across, the curve goes half as far
            x = (xa + xb) / 2 + 0.15 * k * (yb - ya) * inch[1] / inch[0]
            y = (ya + yb) / 2 - 0.15 * k * (xb - xa) * inch[0] / inch[1]
            ax.text(x, y, f" {label} ", fontsize=7, color="0.3", ha="right" if k else "left", va="center")


def _graph_legend(fig: Any, kinds: list[str], columns: int) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(fc=STYLE[k][1][0], ec=STYLE[k][1][1], ls=STYLE[k][1][2], label=LEGEND[k]) for k in kinds]
    fig.legend(handles=handles, loc="upper left", fontsize=7, frameon=False, ncols=columns)


@dataclass
class Picture:
    """A drawn graph: its bytes in ``format``, the engine that drew it, and where it was written (if anywhere).
    Jupyter shows it inline (``_repr_png_``, ``_repr_svg_``)."""

    data: bytes
    format: str
    engine: str
    path: Path | None = None

    def _repr_png_(self) -> bytes | None:
        return self.data if self.format == "png" else None

    def _repr_svg_(self) -> str | None:
        return self.data.decode() if self.format == "svg" else None


def graph(
    tensor: Tensor,
    path: str | Path | None = None,
    format: str | None = None,
    *,
    engine: str = "auto",
    max_nodes: int = 50,
    params: Mapping[str, Tensor] | None = None,
) -> Picture:
    """Draw the autograd graph that produced ``tensor``; write it to ``path`` when given.

    ``format``: png, svg, pdf or dot (the text of ``to_dot``); by default ``path``'s suffix, else png.
    ``engine``: "dot" (graphviz's program), "matplotlib", or "auto": dot when it is on PATH, else matplotlib.
    """
    fmt = (format or (Path(path).suffix.lstrip(".") if path is not None else "") or "png").lower()
    if fmt not in FORMATS:
        raise ValueError(f"viz.graph: format {fmt!r} is not one of {FORMATS}")
    if engine not in ("auto", "dot", "matplotlib"):
        raise ValueError(f"viz.graph: engine {engine!r} is not 'auto', 'dot' or 'matplotlib'")
    if engine == "auto":
        engine = "dot" if shutil.which("dot") else "matplotlib"
    if fmt == "dot":
        data = to_dot(tensor, max_nodes, params).encode()
    elif engine == "dot":
        data = _run_dot(to_dot(tensor, max_nodes, params), fmt)
    else:
        buf = io.BytesIO()
        figure(tensor, max_nodes, params).savefig(buf, format=fmt, dpi=100)
        data = buf.getvalue()
    if path is not None:
        path = Path(path)
        path.write_bytes(data)
    return Picture(data, fmt, "dot" if fmt == "dot" else engine, path)


def _run_dot(text: str, fmt: str) -> bytes:
    if shutil.which("dot") is None:
        raise FileNotFoundError("viz.graph: graphviz's `dot` is not on PATH (install graphviz, or engine='matplotlib')")
    done = subprocess.run(["dot", f"-T{fmt}"], input=text.encode(), capture_output=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"viz.graph: dot -T{fmt} failed (exit {done.returncode}): {done.stderr.decode()[-500:]}")
    return done.stdout
