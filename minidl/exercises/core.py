"""What every exercise's checker shares: load a student's file, run cases smallest first, and say what broke.

A checker is a function ``check(module, tier, seed)`` that raises ``Broke(property, case, detail)`` at the
first property that fails; it runs its cases from the smallest up, so the case it reports is the smallest
that breaks. ``run`` wraps it: a ``NotImplementedError`` becomes "not implemented yet: <function>", any
other exception the student's code raises becomes the property "runs" with the lines of the student's
file it went through (never a whole traceback).

The hidden tier of ``--submit``: ``Exercise.digest(module, seed)`` runs the student's code on an input
made from each of the fixed ``SEEDS`` (other sizes and values than the visible checks use) and returns the
canonical text of the output (``canonical``: floats to 8 significant digits, so a correct solution that
adds in another order still matches; integers exactly). Only the SHA-256 of the reference solution's
text is stored (hashes.py), never the expected values, so a solution tuned to the visible cases is found
out without the answer being in the repository. tests/test_exercises.py regenerates the hashes from the
reference solutions and compares them with the stored ones.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from minidl.exercises.hashes import HIDDEN

HERE = Path(__file__).resolve().parent
SKELETONS, SOLUTIONS = HERE / "skeletons", HERE / "solutions"
WORKSPACE = Path("exercises")  # the student's copies, relative to the directory the command runs in
TIERS = ("check", "submit", "hidden")
SEEDS = (20261125, 31337, 4242)  # the hidden cases' seeds


class Broke(AssertionError):
    """Property ``prop`` failed on ``case`` (a short description of the smallest failing input)."""

    def __init__(self, prop: str, case: str, detail: str):
        super().__init__(f"{prop}: {detail}")
        self.prop, self.case, self.detail = prop, case, detail


@dataclass(frozen=True)
class Exercise:
    """One exercise: the functions the student writes, where the idea is taught, and its checker.

    ``checker`` names, as "module:check_function:digest_function" in minidl.exercises, the functions
    ``check(module, tier, seed)``, which raises ``Broke``, and ``digest(module, seed)``, which returns the
    canonical text of the output on the hidden input made from ``seed`` (hashed, see hashes.py). They are
    imported when used, so that ``list`` and one exercise's check need none of the others' imports.
    """

    number: int
    name: str
    title: str
    functions: tuple[str, ...]
    tutorial: str
    checker: str

    def _resolve(self, which: int) -> Callable[..., Any]:
        parts = self.checker.split(":")
        module = importlib.import_module(f"minidl.exercises.{parts[0]}")
        return getattr(module, parts[which])

    def check(self, module: ModuleType, tier: str, seed: int) -> None:
        self._resolve(1)(module, tier, seed)

    def digest(self, module: ModuleType, seed: int) -> str:
        return self._resolve(2)(module, seed)

    @property
    def filename(self) -> str:
        return f"{self.number:02d}_{self.name}.py"

    @property
    def skeleton(self) -> Path:
        return SKELETONS / self.filename

    @property
    def solution(self) -> Path:
        return SOLUTIONS / self.filename

    @property
    def workspace(self) -> Path:
        return WORKSPACE / self.filename


def load(path: Path) -> ModuleType:
    """Import the file at ``path`` as a fresh module (a new one on every call: edits are seen)."""
    name = f"_minidl_exercise_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Broke("imports", str(path), "not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise Broke("imports", str(path), f"SyntaxError at line {e.lineno}: {e.msg}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001  (the student's module-level code, sys.exit too)
        raise Broke("imports", str(path), f"importing it raised {type(e).__name__}: {e}") from None
    return module


def require(module: ModuleType, names: Iterable[str]) -> None:
    """Every name the exercise asks for is defined (``Class.method`` names the class)."""
    missing = [n for n in names if not hasattr(module, n.split(".")[0])]
    if missing:
        raise Broke("defines", "-", f"the file does not define {', '.join(missing)} (keep the skeleton's names)")


def _student_frames(exc: BaseException, path: Path) -> list[traceback.FrameSummary]:
    target = str(path.resolve())
    frames = traceback.extract_tb(exc.__traceback__)
    return [f for f in frames if str(Path(f.filename).resolve()) == target]


def _function_of(exc: BaseException, path: Path) -> str:
    """The student's function that raised: Class.method where Python knows it (3.11+)."""
    tb, name = exc.__traceback__, None
    target = str(path.resolve())
    while tb is not None:
        code = tb.tb_frame.f_code
        if str(Path(code.co_filename).resolve()) == target:
            name = getattr(code, "co_qualname", code.co_name)
        tb = tb.tb_next
    return name or str(exc) or "?"


def unwrap(exc: BaseException) -> BaseException:
    """A NotImplementedError anywhere in ``exc``'s chain (a harness may have wrapped it), else ``exc``."""
    seen: set[int] = set()
    inner: BaseException | None = exc
    while inner is not None and id(inner) not in seen:
        if isinstance(inner, NotImplementedError):
            return inner
        seen.add(id(inner))
        inner = inner.__cause__ or inner.__context__
    return exc


@dataclass
class Outcome:
    passed: bool
    text: str
    prop: str | None = None  # the property that broke, None on a pass


def run(ex: Exercise, path: Path, tier: str = "check", seed: int = 0) -> Outcome:
    """Check the student's file ``path`` for exercise ``ex``; never raises for what the student's code does.
    NumPy's warnings (an overflow in exp, ...) are silenced: the failure report says what went wrong."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _run(ex, path, tier, seed)


def _run(ex: Exercise, path: Path, tier: str, seed: int) -> Outcome:
    try:
        module = load(path)
        require(module, ex.functions)
        if tier == "hidden":
            check_hidden(ex, module)
        else:
            ex.check(module, tier, seed)
    except Broke as b:
        inner = unwrap(b.__cause__) if b.__cause__ is not None else None
        if isinstance(inner, NotImplementedError):
            return _not_implemented(inner, path)
        return Outcome(
            False, f"FAIL {ex.name}: property '{b.prop}' broke\n  smallest case: {b.case}\n{_indent(b.detail)}", b.prop
        )
    except NotImplementedError as e:
        return _not_implemented(e, path)
    except (Exception, SystemExit) as raised:  # noqa: BLE001  (the student's code raised: say where, in their file)
        inner = unwrap(raised)
        if isinstance(inner, NotImplementedError):
            return _not_implemented(inner, path)
        where = "".join(traceback.format_list(_student_frames(inner, path))) or "  (outside your file)\n"
        case = getattr(raised, "exercise_case", None)
        text = f"FAIL {ex.name}: property 'runs' broke: {type(inner).__name__}: {inner}\n"
        text += (f"  smallest case: {case}\n" if case else "") + where.rstrip()
        return Outcome(False, text, "runs")
    return Outcome(True, f"PASS {ex.name} ({tier})")


def _not_implemented(e: BaseException, path: Path) -> Outcome:
    return Outcome(False, f"FAIL: not implemented yet: {_function_of(e, path)}  ({path})", "implemented")


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def first_failure(cases: Iterable[Any], check_one: Callable[[Any], None], describe: Callable[[Any], str]) -> None:
    """Run ``check_one`` on each case in order (smallest first); re-raise its ``Broke`` naming the case.

    ``check_one`` raises ``Broke`` with an empty case; any other exception is left to ``run``, tagged with
    the case (``exercise_case``) that raised it.
    """
    for case in cases:
        try:
            check_one(case)
        except Broke as b:
            raise Broke(b.prop, describe(case), b.detail) from b.__cause__
        except NotImplementedError:
            raise
        except Exception as e:  # the student's code raised: ``run`` reports it with this case
            e.exercise_case = describe(case)  # type: ignore[attr-defined]
            raise


def canonical(*arrays: Any) -> str:
    """The text hashed for the hidden tier: shape, and each value (floats to 8 significant digits)."""
    parts = []
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind in "fc":
            a = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64) + 0.0  # -0.0 -> 0.0
            flat = a.ravel()
            values = [f"{v.real:.7e},{v.imag:.7e}" if a.dtype.kind == "c" else f"{v:.7e}" for v in flat]
        else:
            values = [str(v) for v in a.ravel().tolist()]
        parts.append(f"{a.shape}:" + " ".join(values))
    return "|".join(parts)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def describe_array(name: str, got: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> str:
    """Where ``got`` and ``want`` differ most: the index and both values, for a failure report."""
    got, want = np.asarray(got), np.asarray(want)
    err = np.abs(got.astype(np.float64) - want) - (atol + rtol * np.abs(want))
    err = np.where(np.isnan(err), np.inf, err)
    index = np.unravel_index(int(np.argmax(err)), want.shape) if want.size else ()
    return f"{name} at index {tuple(int(i) for i in index)}: got {got[index].item()!r}, expected {want[index].item()!r}"


def expect_close(name: str, got: Any, want: np.ndarray, prop: str, atol: float = 1e-10, rtol: float = 1e-8) -> None:
    """Raise ``Broke(prop)`` unless ``got`` is an array of ``want``'s shape within tolerance."""
    if not isinstance(got, np.ndarray):
        raise Broke("shape", "", f"{name}: expected an ndarray of shape {want.shape}, got {type(got).__name__}")
    if got.shape != want.shape:
        raise Broke("shape", "", f"{name}: expected shape {want.shape}, got {got.shape}")
    if not np.allclose(got, want, atol=atol, rtol=rtol, equal_nan=False):
        raise Broke(prop, "", describe_array(name, got, want, atol, rtol))


def check_hidden(ex: Exercise, module: ModuleType) -> None:
    """Raise Broke at the first hidden case whose output's hash differs from the stored one."""
    stored = HIDDEN.get(ex.name)
    if stored is None or len(stored) != len(SEEDS):
        raise RuntimeError(f"exercises: no hidden hashes for {ex.name}; run `python -m minidl.exercises hashes`")
    for k, (seed, want) in enumerate(zip(SEEDS, stored), start=1):
        if sha256(ex.digest(module, seed)) != want:
            raise Broke(
                "hidden output",
                f"hidden case {k} of {len(SEEDS)} (made from seed {seed})",
                "the output differs from the expected one (only its SHA-256 is stored): the visible checks pass,\n"
                "so look for a case they do not cover (the docstring's math, sizes, values)",
            )
