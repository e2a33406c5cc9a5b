"""``python -m minidl.simulate lm|cnn``: the data-parallel trainer's step on 1 to thousands of nodes, in virtual time.

    python -m minidl.simulate lm --nodes 1,2,4,8,16,32 --network 10gbe --allreduce ring
    python -m minidl.simulate lm --preset small --network 1gbe,ib-edr --allreduce ring,tree --plot speedup.png
    python -m minidl.simulate cnn --profile params=25.6e6,rate=100,batch=64 --network ib-fdr --nodes 1,2,4,8,16
    python -m minidl.simulate cnn --model resnet50 --image 224 --batch-size 32 --network omnipath100 --nodes 1,16,256
    python -m minidl.simulate lm --cores-per-node 28 --core-speed 0.5 --efficiency 0.6 --overlap --json

The compute comes from one real rank's training step on this machine (``minidl.simulate.profile``), or from a
saved or described profile (``--profile``); a node description (``--cores-per-node``, ``--core-speed``,
``--efficiency``, ``--ranks-per-node``) scales it; each gradient bucket's allreduce costs what the network
simulator says (``collectives.allreduce_time``). Weak scaling: the batch per rank is fixed.

Before it simulates, the tool estimates the memory and time from the engine each allreduce will use
(``collectives.virtual_time.replay.simulation_estimate``: lockstep schedules by rounds from p = 64 on, every
rank's traces otherwise, where a ring on p ranks traces 6 p^2 events): a run that cannot fit, or would take
more than ten minutes, is refused with the estimate; one of more than ten seconds is announced.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from typing import Any

from collectives.cost import get_params, load_params
from collectives.virtual_time.network import get_link, known_networks
from collectives.virtual_time.replay import simulation_estimate
from collectives.virtual_time.topology import OPTIONS, make_topology
from collectives.virtual_time.trace import available_memory
from minidl.simulate import scheme_flags
from minidl.simulate.network import ALGORITHMS, allreduce_time
from minidl.simulate.node import NodeSpec
from minidl.simulate.profile import Profile, described
from minidl.simulate.step import Row, scaling
from minidl.simulate.tasks import TaskOptions, profile_task


class UsageError(Exception):
    """A bad flag value: printed as one line naming the flag, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minidl.simulate", description=__doc__.split("\n")[0])
    p.add_argument("task", choices=("lm", "cnn"), help="the training program whose step is simulated")
    c = p.add_argument_group("cluster")
    c.add_argument("--nodes", default="1,2,4,8,16,32", help="node counts, comma-separated (default 1,...,32)")
    c.add_argument(
        "--network",
        default="crossbar",
        help=f"network(s), comma-separated: {', '.join(known_networks())} (default crossbar: cost.py's model)",
    )
    c.add_argument("--allreduce", default="ring", help=f"algorithm(s), comma-separated: {', '.join(ALGORITHMS)}")
    c.add_argument(
        "--topology",
        help="switch (default for a named network), crossbar, fattree, dragonfly, torus (with --dims), torus2d, torus3d",
    )
    c.add_argument("--oversubscription", help="fat tree: leaf uplink oversubscription (1: full bisection)")
    c.add_argument("--leaf-size", help="fat tree: nodes per leaf switch")
    c.add_argument(
        "--routing",
        choices=("trunk", "static"),
        help="fat tree: a leaf's uplinks as one trunk (default), or links of their own routed destination mod "
        "uplinks (static, as InfiniBand's D-mod-K and SimGrid's FAT_TREE)",
    )
    c.add_argument("--pod-size", help="fat tree: leaves per pod (three levels: leaves, spines, cores)")
    c.add_argument("--spine-oversubscription", help="three-level fat tree: a spine's uplink oversubscription")
    c.add_argument("--router-size", help="dragonfly: nodes per router")
    c.add_argument("--group-size", help="dragonfly: routers per group (all-to-all; one global link per two groups)")
    c.add_argument("--dims", help="torus: its sides, e.g. 8x8 or 4x4x4")
    c.add_argument(
        "--link-latency",
        help="seconds per link a message crosses, on top of alpha (2 links on a switch, 2-6 on a fat tree, a hop on a torus)",
    )
    c.add_argument("--params", metavar="FILE", help="cost parameters (alpha, beta, gamma) from calibrate, as JSON")
    c.add_argument("--overlap", action="store_true", help="allreduce each bucket as soon as it is ready")
    n = p.add_argument_group("node (scales the measured compute)")
    n.add_argument("--ranks-per-node", default="1", help="ranks on each node (default 1)")
    n.add_argument("--cores-per-node", help="cores of a node (default: one per rank)")
    n.add_argument("--core-speed", default="1", help="speed of a core relative to this machine's (default 1)")
    n.add_argument("--efficiency", default="1", help="fraction of the ideal speed-up from a rank's cores (default 1)")
    n.add_argument(
        "--sharing",
        default="1",
        help="with more ranks per node than cores: the speed a rank keeps while it time-shares a core (default 1)",
    )
    t = p.add_argument_group("profile (default: measured here on the trainer's preset)")
    t.add_argument("--profile", help="a profile JSON file, or a description params=N,rate=R,batch=B[,unit=images]")
    t.add_argument("--save-profile", metavar="FILE", help="write the profile used as JSON")
    t.add_argument("--preset", help="the trainer's preset (default demo)")
    t.add_argument("--batch-size", type=int, help="items per rank per step (LM: streams)")
    t.add_argument("--num-steps", type=int, help="LM: BPTT window")
    t.add_argument("--hidden-size", type=int)
    t.add_argument("--layers", type=int)
    t.add_argument("--vocab", type=int, help="LM: vocabulary size (default: the preset's corpus)")
    t.add_argument("--depth", type=int)
    t.add_argument("--width", type=int)
    t.add_argument("--model", help="cnn: resnet (the CIFAR ResNet, default) or torchvision's resnet18 ... resnet152")
    t.add_argument("--image", type=int, help="cnn: the images' side in pixels (default the preset's)")
    t.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    t.add_argument("--fusion-mb", type=float, default=64.0, help="tensor fusion MiB per bucket (default 64)")
    t.add_argument("--profile-steps", type=int, default=5, help="steps measured (median; default 5)")
    t.add_argument(
        "--sparse-embedding", action="store_true", help="lm: the embedding's gradient exchanged as its non-zero rows"
    )
    scheme_flags.add_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="one JSON object per row")
    o.add_argument("--plot", metavar="FILE", help="speed-up against nodes, one curve per algorithm and network")
    return p


def number_list(flag: str, text: str, kind: type = int) -> list[Any]:
    """The comma-separated positive numbers of ``flag``; a UsageError naming it otherwise."""
    values = []
    for part in text.split(","):
        try:
            v = kind(part.strip())
        except ValueError:
            v = None
        if v is None or not v > 0:
            raise UsageError(f"{flag}: {part.strip()!r} is not a positive {'integer' if kind is int else 'number'}")
        if not math.isfinite(v):
            raise UsageError(f"{flag}: {part.strip()!r} is not a finite number")
        values.append(v)
    return values


# A node's or a network's factor beyond these gives no cluster, only overflow (a 300-digit step time, NaN rows).
FACTOR_RANGE = (1e-6, 1e6)
MAX_LINK_LATENCY = 1.0  # seconds per link: a million times a switch's


def in_range(flag: str, value: float, low: float, high: float, what: str) -> float:
    """``value`` where ``low <= value <= high``; a UsageError naming ``flag`` and the range otherwise."""
    if not low <= value <= high:
        raise UsageError(f"{flag}: {value:g} is outside {low:g} .. {high:g} ({what})")
    return value


def node_spec(args: argparse.Namespace) -> NodeSpec:
    (ranks,) = number_list("--ranks-per-node", args.ranks_per_node)
    cores = number_list("--cores-per-node", args.cores_per_node)[0] if args.cores_per_node else None
    (speed,) = number_list("--core-speed", args.core_speed, float)
    (eff,) = number_list("--efficiency", args.efficiency, float)
    (sharing,) = number_list("--sharing", args.sharing, float)
    for flag, value in (("--efficiency", eff), ("--sharing", sharing)):
        if value > 1:
            raise UsageError(f"{flag}: {value:g} is above 1 (a fraction of the ideal speed: 0 < s <= 1)")
    in_range("--core-speed", speed, *FACTOR_RANGE, "a core's speed relative to this machine's")
    for flag, value in (("--efficiency", eff), ("--sharing", sharing)):
        in_range(flag, value, FACTOR_RANGE[0], 1, "a fraction of the ideal speed")
    return NodeSpec(ranks, cores, speed, eff, sharing=sharing)


TASK_SIZES = ("batch_size", "num_steps", "hidden_size", "layers", "vocab", "depth", "width", "image", "profile_steps")


def check_task_flags(args: argparse.Namespace) -> None:
    """The profile's sizes: positive where given (a 0 BPTT window would divide by zero, a -3 batch reach NumPy)."""
    for name in TASK_SIZES:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')}: {value} is not a positive integer")
    if not (args.fusion_mb > 0 and math.isfinite(args.fusion_mb)):
        raise UsageError(f"--fusion-mb: {args.fusion_mb} is not a positive number of MiB")


def network_options(args: argparse.Namespace) -> dict[str, Any]:
    """The topology and its options, checked: positive numbers, a torus's sides as AxB[xC]."""
    options: dict[str, Any] = {"topology": args.topology}
    if args.oversubscription:
        (ratio,) = number_list("--oversubscription", args.oversubscription, float)
        options["oversubscription"] = in_range("--oversubscription", ratio, *FACTOR_RANGE, "downlinks per uplink")
    if args.leaf_size:
        (options["leaf_size"],) = number_list("--leaf-size", args.leaf_size)
    if args.routing:
        options["routing"] = args.routing
    if args.pod_size:
        (options["pod_size"],) = number_list("--pod-size", args.pod_size)
    if args.spine_oversubscription:
        (options["spine_oversubscription"],) = number_list(
            "--spine-oversubscription", args.spine_oversubscription, float
        )
    for flag in ("router_size", "group_size"):
        if getattr(args, flag):
            (options[flag],) = number_list(f"--{flag.replace('_', '-')}", getattr(args, flag))
    if args.dims:
        options["dims"] = tuple(number_list("--dims", args.dims.replace("x", ",")))
    if args.link_latency:
        (latency,) = number_list("--link-latency", args.link_latency, float)
        options["link_latency"] = in_range("--link-latency", latency, 0, MAX_LINK_LATENCY, "seconds per link")
    return {k: v for k, v in options.items() if v is not None}


def check_torus(nodes: list[int], options: dict[str, Any]) -> None:
    """A torus of --dims AxB holds A*B nodes: every --nodes count but 1 (no network) must be that."""
    if "dims" not in options:
        return
    holds = math.prod(options["dims"])
    others = [n for n in nodes if n not in (1, holds)]
    if others:
        raise UsageError(f"--nodes {others[0]}: --dims {options['dims']} holds {holds} nodes (give --nodes {holds})")


MAX_SECONDS = 600.0  # a simulation estimated to take longer is refused, with the estimate
TELL_SECONDS = 10.0  # one estimated to take longer is announced on stderr before it starts


def check_size(nodes: list[int], algorithms: list[str], networks: int, node: NodeSpec, buckets: list[int]) -> None:
    """Estimate the simulation's time and memory from the engine each allreduce will use (simulation_estimate:
    rounds for lockstep schedules from p = 64 on, events on every rank's traces otherwise), for each bucket size
    and network: refuse what would not fit in memory or would take longer than MAX_SECONDS, announce what takes
    a while."""
    seconds, slowest, largest = 0.0, (0.0, "", 0), (0, "", 0)
    node_aware = ("hierarchical", "hierarchical_rs") if node.ranks_per_node > 1 else ()  # what auto tries as well
    for name in dict.fromkeys(n for a in algorithms for n in ((a, *node_aware) if a == "auto" else (a,))):
        for p in (n * node.ranks_per_node for n in nodes if n * node.ranks_per_node > 1):
            for nbytes in sorted(set(buckets)) or [4]:
                try:
                    t, memory = simulation_estimate(name, p, nbytes, node.ranks_per_node, limit=MAX_SECONDS)
                except MemoryError as e:  # tracing the sample that says whether it runs by rounds
                    raise UsageError(f"--nodes {max(nodes)}: {e}") from None
                seconds += t * networks
                slowest, largest = max(slowest, (t * networks, name, p)), max(largest, (memory, name, p))
    available = available_memory()
    if largest[0] > available:
        raise UsageError(
            f"--nodes {max(nodes)}: {largest[1]} on {largest[2]} ranks needs about {largest[0] / 2**30:.1f} GiB of "
            f"traces, more than the {available / 2**30:.1f} GiB available: give fewer nodes"
        )
    what = f"about {seconds:.{0 if seconds >= 10 else 1}f} s of simulation here (the longest part: {slowest[1]} on {slowest[2]} ranks)"
    if seconds > MAX_SECONDS:
        hint = " (or an algorithm with fewer messages than the ring's p^2: tree, recursive_doubling)"
        raise UsageError(
            f"--nodes {max(nodes)}: {what}, more than {MAX_SECONDS / 60:.0f} minutes: give fewer nodes"
            + (hint if slowest[1] == "ring" else "")
        )
    if seconds > TELL_SECONDS:
        print(f"python -m minidl.simulate: {what}", file=sys.stderr, flush=True)


def parse_description(text: str) -> Profile:
    """``params=25.6e6,rate=100,batch=64[,unit=images]`` -> ``profile.described(...)``."""
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    unknown = set(fields) - {"params", "rate", "batch", "unit", "fusion_mb", "activation_mb", "layers"}
    if unknown or not {"params", "rate", "batch"} <= set(fields):
        raise UsageError(
            f"--profile: {text!r} is neither a file nor params=N,rate=R,batch=B[,unit=U,fusion_mb=M,activation_mb=A,"
            "layers=L]"
        )
    try:
        fusion = int(float(fields.get("fusion_mb", 64)) * 2**20)
        profile = described(
            float(fields["params"]),
            float(fields["rate"]),
            int(fields["batch"]),
            fields.get("unit", "images"),
            fusion_bytes=fusion,
        )
        activations = int(float(fields.get("activation_mb", 0)) * 2**20)  # at a layer boundary, the whole batch
        return replace(profile, activation_bytes=activations, layers=int(fields.get("layers", 1)))
    except ValueError as e:
        raise UsageError(f"--profile: {e}") from None


def get_profile(args: argparse.Namespace) -> Profile:
    if args.profile and args.sparse_embedding:
        raise UsageError("--sparse-embedding: a given --profile already says which buckets go by rows; measure one")
    if args.profile:
        if "=" in args.profile:
            return parse_description(args.profile)
        try:
            return Profile.load(args.profile)
        except (OSError, ValueError) as e:
            raise UsageError(f"--profile: {args.profile}: {e}") from None
    opts = TaskOptions(
        args.preset, args.batch_size, args.num_steps, args.hidden_size, args.layers, args.vocab,
        args.depth, args.width, args.dtype, args.fusion_mb, args.profile_steps, sparse_embedding=args.sparse_embedding,
        model=args.model, image=args.image,
    )  # fmt: skip
    try:
        return profile_task(args.task, opts)
    except ValueError as e:
        raise UsageError(str(e)) from None


def format_table(rows: list[Row], unit: str) -> str:
    head = (
        f"{'nodes':>6}{'ranks':>7}  {'allreduce':<19}{'network':<10}{unit + '/s':>12}{'per node':>10}"
        f"{'speed-up':>10}{'effic.':>8}{'step ms':>10}{'compute':>9}{'comm':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.nodes:>6}{r.ranks:>7}  {r.algorithm:<19}{r.network:<10}{r.rate:>12,.0f}{r.per_node_rate:>10,.0f}"
            f"{r.speedup:>10.2f}{100 * r.efficiency:>7.0f}%{1e3 * r.step_s:>10.2f}{1e3 * r.compute_s:>9.2f}"
            f"{1e3 * r.comm_s:>9.2f}"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    nodes = sorted({r.nodes for r in rows})
    ax.plot(nodes, nodes, "k--", label="ideal")
    for key in dict.fromkeys((r.algorithm, r.network) for r in rows):
        mine = [r for r in rows if (r.algorithm, r.network) == key]
        ax.plot([r.nodes for r in mine], [r.speedup for r in mine], marker="o", label=f"{key[0]}, {key[1]}")
    ax.set(xscale="log", yscale="log", xlabel="nodes", ylabel="speed-up over one node", title=title)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def run(args: argparse.Namespace) -> list[Row]:
    nodes = number_list("--nodes", args.nodes)
    node = node_spec(args)
    algorithms = [a.strip() for a in args.allreduce.split(",")]
    bad = [a for a in algorithms if a not in ALGORITHMS]
    if bad:
        raise UsageError(f"--allreduce: unknown {', '.join(bad)}; known: {', '.join(ALGORITHMS)}")
    try:
        chosen = scheme_flags.schemes(args, algorithms)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        params = load_params(args.params) if args.params else None
    except (OSError, ValueError) as e:
        raise UsageError(f"--params: {e}") from None
    networks = [n.strip() for n in args.network.split(",")]
    options = network_options(args)
    check_torus(nodes, options)
    probe = math.prod(options["dims"]) if "dims" in options else 2  # nodes that the network can hold
    for network in networks:  # an unknown name or topology fails here, in one line, before the profile is measured
        try:
            allreduce_time(
                "ring", probe * node.ranks_per_node, 8, network, params, ranks_per_node=node.ranks_per_node, **options
            )
        except ValueError as e:
            raise UsageError(f"--network {network}: {e}") from None
    if options.get("topology") == "dragonfly":  # its groups bound the nodes: refused before the profile is measured
        try:
            make_topology(
                "dragonfly", max(nodes), 1.0, **{k: v for k, v in options.items() if k in OPTIONS["dragonfly"]}
            )
        except ValueError as e:
            raise UsageError(f"--nodes {max(nodes)}: {e}") from None
    check_task_flags(args)
    profile = get_profile(args)
    try:
        scheme_flags.check_profile(chosen, profile)
    except ValueError as e:
        raise UsageError(str(e)) from None
    check_size(nodes, algorithms, len(networks), node, [b.nbytes for b in profile.buckets])
    if args.save_profile:
        profile.save(args.save_profile)
    rows = [
        row
        for network in networks
        for algorithm, scheme in chosen
        for row in scaling(profile, nodes, algorithm, network, node, args.overlap, params, options, scheme)
    ]
    if args.json:
        for r in rows:
            print(json.dumps(r.as_dict()))
    else:
        print(format_table(rows, profile.unit))
        print(describe_model(profile, node, args, params))
    if args.plot:
        plot(rows, args.plot, profile.task.split(" (")[0])
    return rows


def link_text(network: str, c: Any) -> str:
    """The link between nodes of ``network`` as the simulation uses it: the cost model's (crossbar: the defaults or
    --params), or a preset's own (its alpha and bandwidth; --params then is the link within a node)."""
    if network == "crossbar":
        return f"crossbar links: alpha {1e6 * c.alpha:.2f} us, beta {1e9 * c.beta:.4f} ns/B"
    link = get_link(network)
    return f"{network} links: alpha {1e6 * link.alpha:.3g} us, {link.bandwidth / 1e9:.3g} GB/s (the preset's own)"


def describe_model(profile: Profile, node: NodeSpec, args: argparse.Namespace, params: Any) -> str:
    c = params or get_params()
    links = "; ".join(link_text(n.strip(), c) for n in args.network.split(","))
    cost = f"{links}; gamma {1e9 * c.gamma:.4f} ns/B" + (f" (alpha, beta, gamma from {args.params})" if params else "")
    mode = "buckets allreduced as they become ready (--overlap)" if args.overlap else "allreduces after the backward"
    return "\n".join(
        [
            "model:",
            f"  profile: {profile.describe()}",
            f"  source: {profile.source}" + "".join(f"; {n}" for n in profile.notes),
            f"  {node.describe(profile)}",
            f"  network {args.network}"
            + "".join(f", {k} {v}" for k, v in network_options(args).items())
            + f", {cost}; {mode}",
            "  weak scaling: the batch per rank is fixed; speed-up = rate / rate of one node, efficiency = speed-up / nodes",
        ]
        + [line for line in [scheme_flags.describe(args)] if line]
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (UsageError, NotImplementedError) as e:
        print(f"python -m minidl.simulate: error: {e}", file=sys.stderr)
        return 2
    return 0
