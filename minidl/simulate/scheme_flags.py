"""The command line's flags for the parallel schemes and the ranks' variation (schemes.py), and their checks.

--parallel data,ps-async,local-sgd    schemes to compare (default data: DistributedOptimizer's step)
--jitter 0.1                           each rank's compute per step: lognormal, mean 1, CV 0.1
--straggler 0.01:2                     a rank is a straggler in a step with probability 0.01, twice as slow
--servers S | --local-steps H | --microbatches M --schedule gpipe|1f1b
"""

from __future__ import annotations

import argparse
import math

from minidl.simulate.profile import Profile
from minidl.simulate.schemes import SCHEMES, Scheme, Variation

# a scheme's own flag: its default, the --parallel schemes it applies to, what it sets (given with none of them
# it would be ignored in silence: refused, as python -m minidl.train refuses a flag its --parallel mode ignores)
SCHEME_FLAGS = {
    "--servers": ("1", ("ps", "ps-async"), "ps, ps-async: server nodes beside the workers"),
    "--local-steps": ("8", ("local-sgd",), "local-sgd: steps between averages, H"),
    "--microbatches": ("8", ("pipeline",), "pipeline: microbatches per step, m"),
    "--schedule": ("1f1b", ("pipeline",), "pipeline schedule"),
}


def setting(args: argparse.Namespace, flag: str) -> str:
    """The value of a scheme's flag: as given, else its default."""
    value = getattr(args, flag[2:].replace("-", "_"))
    return SCHEME_FLAGS[flag][0] if value is None else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    s = parser.add_argument_group("schemes and stragglers (minidl.simulate.schemes)")
    s.add_argument(
        "--parallel", default="data", help=f"scheme(s), comma-separated: {', '.join(SCHEMES)} (default data)"
    )
    s.add_argument("--jitter", help="coefficient of variation of each rank's compute per step (lognormal; default 0)")
    s.add_argument("--straggler", metavar="FRACTION:SLOWDOWN", help="e.g. 0.01:2: 1%% of rank-steps twice as slow")
    s.add_argument("--draws", default="200", help="steps drawn to average the slowest rank over (default 200)")
    for flag, (default, _, text) in SCHEME_FLAGS.items():
        s.add_argument(
            flag, help=f"{text} (default {default})", **({"choices": ("gpipe", "1f1b")} if "sched" in flag else {})
        )


def _number(flag: str, text: str, kind: type = float) -> float:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        raise ValueError(f"{flag}: {text!r} is not a{'n integer' if kind is int else ' finite number'}")
    return value


def variation(args: argparse.Namespace) -> Variation:
    """--jitter, --straggler and --draws as a Variation; a ValueError naming the flag otherwise."""
    jitter = _number("--jitter", args.jitter) if args.jitter else 0.0
    straggler, slowdown = 0.0, 1.0
    if args.straggler:
        fraction, colon, slow = args.straggler.partition(":")
        if not colon:
            raise ValueError(f"--straggler: {args.straggler!r} is not FRACTION:SLOWDOWN (e.g. 0.01:2)")
        straggler, slowdown = _number("--straggler", fraction), _number("--straggler", slow)
    draws = _number("--draws", args.draws, int)
    checks = {
        "--jitter": (jitter, jitter >= 0),
        "--straggler": (args.straggler, 0 <= straggler <= 1 and slowdown >= 1),
        "--draws": (draws, draws >= 1),
    }
    for flag, (value, ok) in checks.items():
        if not ok:
            what = "a fraction in [0, 1] and a slowdown >= 1" if flag == "--straggler" else "not negative"
            raise ValueError(f"{flag}: {value} must be {what if flag != '--draws' else 'a positive integer'}")
    return Variation(jitter, straggler, slowdown, int(draws))


def schemes(args: argparse.Namespace, algorithms: list[str]) -> list[tuple[str, Scheme | None]]:
    """(algorithm, Scheme) per --parallel name, and per allreduce algorithm where the scheme has one (None: the
    plain data-parallel step of step.py, as without these flags)."""
    names = [n.strip() for n in args.parallel.split(",")]
    bad = [n for n in names if n not in SCHEMES]
    if bad:
        raise ValueError(f"--parallel: unknown {', '.join(bad)}; known: {', '.join(SCHEMES)}")
    for flag, (_, uses, _) in SCHEME_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_")) is not None and not set(uses) & set(names):
            raise ValueError(f"{flag} applies only to --parallel {'/'.join(uses)}, not to --parallel {args.parallel}")
    v = variation(args)
    settings = {
        "servers": int(_number("--servers", setting(args, "--servers"), int)),
        "local_steps": int(_number("--local-steps", setting(args, "--local-steps"), int)),
        "microbatches": int(_number("--microbatches", setting(args, "--microbatches"), int)),
        "schedule": setting(args, "--schedule"),
        "overlap": args.overlap,
        "variation": v,
    }
    out: list[tuple[str, Scheme | None]] = []
    for name in names:
        if name == "data" and v.none:
            out += [(algorithm, None) for algorithm in algorithms]  # step.py's step as it always was
            continue
        uses = algorithms if name in ("data", "local-sgd", "tensor") else algorithms[:1]
        out += [(a, Scheme(name, a, **settings)) for a in uses]
    return out


def describe(args: argparse.Namespace) -> str:
    """One line for the model's description: the schemes and the variation, or "" for the plain data step."""
    v = variation(args)
    if args.parallel.strip() == "data" and v.none:
        return ""
    spread = f"jitter CV {v.jitter:g}, stragglers {100 * v.straggler:g}% x {v.slowdown:g}, {v.draws} steps drawn"
    return (
        f"  schemes {args.parallel} (minidl/simulate/schemes.py; ps: {setting(args, '--servers')} server node(s) beside the "
        f"workers; pipeline and tensor: one batch split over the nodes, strong scaling); {spread}"
    )


def check_profile(chosen: list[tuple[str, Scheme | None]], profile: Profile) -> None:
    """Pipeline and tensor parallelism send activations: refuse a profile that does not say how many bytes."""
    split = sorted({s.parallel for _, s in chosen if s is not None and s.parallel in ("pipeline", "tensor")})
    if split and not profile.activation_bytes:
        raise ValueError(
            f"--parallel {split[0]}: the profile gives no activation bytes; measure one, or describe it with "
            "activation_mb=A[,layers=L]"
        )
