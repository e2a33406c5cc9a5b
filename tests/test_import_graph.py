"""The import graph of minidl and collectives: the only circle is tensor <-> ops, and Tensor declares its interface.

Imports are read from the source (module level and inside functions; ``if TYPE_CHECKING:`` blocks are type
hints, not imports at run time, and are left out).
"""

import ast
import functools
import inspect
import pathlib

import numpy as np

import collectives
import minidl

ROOT = pathlib.Path(minidl.__file__).parent
PACKAGES = (ROOT, pathlib.Path(collectives.__file__).parent)  # both under the repository root
CORE = ("minidl.tensor", "minidl.autograd", "minidl.saved", "minidl.creation", "minidl.gradcheck")


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
