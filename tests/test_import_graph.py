"""The import graph of minidl and collectives: the only circle is tensor <-> ops, and Tensor declares its interface.

Imports are read from the source (module level and inside functions; ``if TYPE_CHECKING:`` blocks are type
hints, not imports at run time, and are left out).
"""

import ast
import functools
import inspect
import pathlib
import re

import numpy as np

import collectives
import minidl

ROOT = pathlib.Path(minidl.__file__).parent
PACKAGES = (ROOT, pathlib.Path(collectives.__file__).parent)  # both under the repository root
# The afternoon core (docs/core.md): the files a student reads first, each held to a line budget (its size when the
# reading path was written, plus a margin). A change that grows a file past it fails here: its author either moves
# the new lines out of the core (a fast path, a check, a tool beside it) or raises the budget, consciously.
CORE_BUDGET = {
    "minidl/tensor.py": 480,
    "minidl/autograd.py": 420,
    "minidl/saved.py": 150,
    "minidl/creation.py": 90,
    "minidl/gradcheck.py": 300,  # 253 lines when the path was written; 282 with its failure message (issue 32)
    "minidl/ops/elementwise.py": 165,
    "minidl/ops/linalg.py": 60,
    "minidl/nn/module.py": 230,
    "minidl/nn/linear.py": 80,
    "minidl/nn/rnn.py": 350,
    "minidl/nn/im2col.py": 150,
    "minidl/nn/conv.py": 265,
    "minidl/optim/optimizer.py": 300,
    "minidl/optim/sgd.py": 85,
    "collectives/common.py": 175,
    "collectives/algorithms/ring.py": 100,
    "collectives/algorithms/tree.py": 90,
    "collectives/algorithms/fold.py": 135,
    "collectives/algorithms/recursive_doubling.py": 60,
    "minidl/distributed/data_parallel/average.py": 40,
    "minidl/distributed/data_parallel/fusion.py": 210,
    "minidl/distributed/data_parallel/overlap.py": 110,
    "minidl/distributed/data_parallel/zero.py": 345,
    "minidl/distributed/pipeline/schedule.py": 245,
    "minidl/distributed/pipeline/engine.py": 315,
}
CORE = tuple(path.removesuffix(".py").replace("/", ".") for path in CORE_BUDGET)
# What a core file may import besides the core. SEAMS: the named doors to hardening (the engine's Sweep rounds a
# Function's gradients with minidl.amp; the short-message fast path; the data-parallel exchange strategies).
# PLAIN: library modules the core stands on, none of them hardening. CROSSINGS: the core's imports of hardening
# that go through no seam yet, each a debt: the list may only shrink (a new crossing fails, and so does a listed
# one that is gone, so that the list stays true).
SEAMS = {"minidl.amp", "collectives.fastpath", "minidl.distributed.data_parallel.gradient_exchange"}
PLAIN = {
    "minidl",
    "collectives",
    "minidl.ops",
    "minidl.ops.shape",
    "minidl.ops.activation",
    "minidl.nn.init",
    "minidl.nn.dropout",
    "minidl.nn.container",
    "minidl.nn.pad",
    "minidl.distributed.comm",
    "minidl.distributed.wire",
    "minidl.distributed.data_parallel.allreduce",
    "minidl.distributed.model_parallel.layerwise",
    "minidl.distributed.model_parallel.p2p",
}
CROSSINGS = {
    ("minidl.nn.rnn", "minidl.nn.lstm_kernel"): "the fused LSTM kernel runs nn.LSTM; lstm_cell is the textbook",
    ("minidl.nn.conv", "minidl.nn.conv_gemm"): "conv.py's choose_method picks a fast path per shape",
    ("minidl.nn.conv", "minidl.nn.conv_implicit"): "the same",
    ("minidl.nn.conv", "minidl.nn.conv_polyphase"): "the same",
    ("minidl.distributed.data_parallel.fusion", "minidl.distributed.data_parallel.compression"): "fp16 on the wire",
    ("minidl.distributed.data_parallel.fusion", "minidl.distributed.data_parallel.sparse_rows"): "embedding rows",
    ("minidl.distributed.data_parallel.overlap", "minidl.distributed.timeout"): "the thread level of a wrapped comm",
    ("minidl.distributed.data_parallel.zero", "minidl.distributed.data_parallel.timing"): "the step's timings",
    ("minidl.distributed.data_parallel.zero", "minidl.distributed.fingerprint"): "the ranks' layouts agree",
    ("minidl.distributed.data_parallel.zero", "minidl.distributed.lockstep"): "ranks at different steps",
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: set[str] = frozenset()) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):  # `if TYPE_CHECKING:` bodies
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:  # `from minidl import ops` imports the module minidl.ops
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in modules else node.module)
    return {m for m in found if m.split(".")[0] in ("minidl", "collectives")}


@functools.cache  # read once for all the tests (about 3 s)
def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for package in PACKAGES for p in package.rglob("*.py")}
    return {name: {m for m in _imports(p, set(files)) if m in files and m != name} for name, p in files.items()}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return False


def _group(name: str) -> str:
    return "minidl.ops" if name.startswith("minidl.ops") else name


def test_only_circle_through_the_core_is_tensor_and_ops():
    graph = _graph()
    for name in graph:
        if not (name in CORE or name.startswith("minidl.ops")):
            continue
        for dep in graph[name]:
            if _reaches(graph, dep, name):  # a circle through name -> dep
                pair = {_group(name), _group(dep)}
                assert pair <= {"minidl.tensor", "minidl.ops"}, f"import circle {name} -> {dep} -> ... -> {name}"


def test_no_import_circle_but_tensor_and_ops():
    """Every module of minidl and collectives: a circle through two modules is tensor <-> ops, or none."""
    graph = _graph()
    circles = sorted(
        f"{name} -> {dep} -> ... -> {name}"
        for name in graph
        for dep in graph[name]
        if _reaches(graph, dep, name) and not {_group(name), _group(dep)} <= {"minidl.tensor", "minidl.ops"}
    )
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_autograd_never_imports_tensor_at_run_time():
    assert not any(m.startswith("minidl.tensor") for m in _imports(ROOT / "autograd.py"))


def test_tensor_interface_is_declared_in_its_class_body():
    """Every operator and method is written in minidl/tensor.py, none attached from elsewhere."""
    body = {n for n, v in vars(minidl.Tensor).items() if callable(v) or isinstance(v, property)}
    for name in ("__add__", "__matmul__", "__getitem__", "__eq__", "sum", "reshape", "exp", "relu", "softmax", "T"):
        assert name in body
    for name, value in vars(minidl.Tensor).items():
        fn = value.fget if isinstance(value, property) else value
        if inspect.isfunction(fn):
            assert fn.__module__ == "minidl.tensor", f"Tensor.{name} comes from {fn.__module__}"
    a = minidl.tensor(np.ones((2, 2)), requires_grad=True)
    (a + a).sum().backward()  # the expression mypy used to reject
    np.testing.assert_array_equal(a.grad, np.full((2, 2), 2.0))


def test_core_files_stay_within_their_line_budgets():
    over = {
        path: n
        for path, budget in CORE_BUDGET.items()
        if (n := len((ROOT.parent / path).read_text().splitlines())) > budget
    }
    assert not over, f"core files past their line budget (tests/test_import_graph.py CORE_BUDGET): {over}"


def test_core_imports_hardening_only_through_the_seams():
    graph = _graph()
    crossings = {(name, dep) for name in CORE for dep in graph[name] if dep not in CORE and dep not in SEAMS | PLAIN}
    new = sorted(crossings - set(CROSSINGS))
    assert not new, f"core files import hardening outside the seams {sorted(SEAMS)}: {new}"
    gone = sorted(set(CROSSINGS) - crossings)
    assert not gone, f"these crossings are gone: take them off CROSSINGS: {gone}"


def _definition_lines(path: pathlib.Path, name: str) -> tuple[int, int]:
    """(first, last) line of the def or class ``name`` ("Class.method" for a method) in ``path``."""
    body: list[ast.stmt] = ast.parse(path.read_text()).body
    node = None
    for part in name.split("."):
        found = [n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part]
        assert found, f"docs/core.md names {name}, which {path} does not define"
        node = found[0]
        body = node.body
    assert node is not None and node.end_lineno is not None
    return node.lineno, node.end_lineno


def _reading_path() -> list[tuple[str, int, int, str]]:
    """docs/core.md's stops: (path, first line, last line, the def or class named after the link)."""
    text = (ROOT.parent / "docs" / "core.md").read_text()
    stops = re.findall(r"\[([\w/]+\.py):(\d+)-(\d+)\]\(\.\./\1\)\s+`([\w.]+)`", text)
    return [(path, int(a), int(b), name) for path, a, b, name in stops]


def test_reading_path_ranges_are_the_definitions_they_name():
    """Each stop of docs/core.md is ``[path:first-last](../path) `name```: first is the line of ``def name`` or
    ``class name`` and last is the line it ends on, so an edit that moves or grows the code fails here."""
    stops = _reading_path()
    assert len(stops) >= 25  # the seven stops of the afternoon, each with its ranges
    wrong = []
    for path, first, last, name in stops:
        lines = _definition_lines(ROOT.parent / path, name)
        if lines != (first, last):
            wrong.append(f"{path}:{first}-{last} `{name}` is now {path}:{lines[0]}-{lines[1]}")
    assert not wrong, "docs/core.md's ranges moved:\n" + "\n".join(wrong)
    named = {path for path, *_ in stops}
    assert named <= set(CORE_BUDGET), f"docs/core.md reads files outside the core: {sorted(named - set(CORE_BUDGET))}"


def test_layout_marks_exactly_the_core_files_as_core():
    """docs/layout.md's kind column: a row of kind ``core`` is core; ``core: `a.py`, `b.py`; ...`` names the
    core files of a row's folder. Together they are CORE_BUDGET's files."""
    marked = set()
    for line in (ROOT.parent / "docs" / "layout.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[2].startswith("core"):
            continue
        paths = re.findall(r"`([^`]+)`", cells[0])
        if cells[2].startswith("core:"):
            names = re.findall(r"`([^`]+)`", cells[2].split(";")[0])
            folder = paths[0] if paths[0].endswith("/") else paths[0].rpartition("/")[0] + "/"
            marked |= {folder + n for n in names}
        else:
            marked |= set(paths)
    assert marked == set(CORE_BUDGET), (sorted(marked - set(CORE_BUDGET)), sorted(set(CORE_BUDGET) - marked))


def test_mpi4py_is_imported_only_where_minidl_distributed_says():
    """minidl/distributed/__init__.py's claim: no module imports mpi4py at import time, and in minidl only
    minidl.distributed and minidl.tools.info import it at all (inside the functions that need it)."""
    at_import, anywhere = set(), set()
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            tree = ast.parse(path.read_text())
            name = _module_name(path)
            for node in ast.walk(tree):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                mods += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                if any(m.split(".")[0] == "mpi4py" for m in mods):
                    anywhere.add(name)
                    if node in tree.body:
                        at_import.add(name)
    assert not at_import, f"mpi4py imported at module level: {sorted(at_import)}"
    minidl_users = {m for m in anywhere if m.startswith("minidl.")}
    assert minidl_users and all(
        m.startswith("minidl.distributed.") or m == "minidl.tools.info" for m in minidl_users
    ), sorted(minidl_users)
