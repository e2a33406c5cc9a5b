"""SimGrid as the oracle of the virtual-time cluster: replay minidl's traces on a SimGrid platform.

Run with the system Python that has SimGrid's bindings (``apt-get install python3-simgrid``), not the
virtualenv: it needs nothing but the standard library and ``simgrid``. It reads one job as JSON on
stdin and prints the virtual seconds of the slowest rank:

    {"platform": {"topology": "crossbar" (= "switch") | "fattree" | "torus2d" | "torus3d" | "dragonfly", "bandwidth": B/s,
                  "latency": s per link, "leaf_size": n, "oversubscription": x, "routing": "trunk" | "static",
                  "pod_size": n, "spine_oversubscription": x, "dims": [a, b, ...], "limiter": bool},
     "gamma": s per byte reduced, "traces": [rank 0's rows, rank 1's rows, ...]}

The rows are collectives.virtual_time.trace's (code, peer, tag, nbytes, source, recvtag, recvbytes,
request, context). Each rank is an actor that plays them: a send is a ``put`` to the mailbox named
(source, destination, tag, context), so messages match in MPI's order; sends are synchronous as in
minidl's replay; a reduction of n bytes executes n gamma seconds of a 1 Gflop/s host.

The platforms (SimGrid's CM02 model, its factors 1: a message costs the sum of its links' latencies,
then its bytes at the max-min fair share of its links):

    switch     a cluster with SPLITDUPLEX private links (each host's up and down link): 2 links a
               message, the NICs shared. Also the oracle for minidl's crossbar: in ring, recursive
               doubling and the binomial tree no rank sends (or receives) two messages at once, so no
               NIC is shared and the two coincide. (SimGrid's FATPIPE is no crossbar: in 3.32 a
               Sendrecv through FATPIPE links takes twice the time of one message.)
    fattree    leaves of leaf_size hosts (clusters, SPLITDUPLEX), each with a trunk to the spine of
               leaf_size B / oversubscription each way: 2 links within a leaf, 4 between leaves
    torus2d    SimGrid's TORUS cluster (SPLITDUPLEX): the hosts are the routers, one link a hop. It has
               no NIC, where minidl's torus nodes inject and eject through one of the link's bandwidth each
               way: the two agree while no node sends (or receives) on two links at once, as in the
               allreduce algorithms. With "limiter": true each host gets SimGrid's limiter_link of that
               bandwidth, but in 3.32 it is one link for both ways (a Sendrecv through it takes twice as long
               as one message): minidl's NIC where no node sends and receives at once (gather, scatter)
    fattree with "routing": "static"
               SimGrid's FAT_TREE cluster, routed destination-mod-k: leaves of leaf_size hosts with
               leaf_size / oversubscription uplinks; with pod_size, pods of that many leaves whose spines
               have pod_size / spine_oversubscription uplinks to the cores
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

CONFIG = [
    "--cfg=network/model:CM02",  # latency factor 1, bandwidth factor 1, no RTT weighting
    "--cfg=network/crosstraffic:0",  # no reverse flow of acknowledgements
    "--cfg=network/TCP-gamma:1e30",  # no TCP window bound on the rate
    "--log=root.thresh:critical",
]
SEND, RECV, SENDRECV, ISEND, IRECV, WAIT, REDUCE = range(7)
SPEED = 1e9  # flop/s of a host: a reduction of n bytes is n * gamma * SPEED flops


def _cluster(cid: str, first: int, last: int, bw: float, lat: float, sharing: str, extra: str = "") -> str:
    return (
        f'<cluster id="{cid}" prefix="h" suffix="" radical="{first}-{last}" speed="1Gf" '
        f'bw="{bw!r}Bps" lat="{lat!r}s" sharing_policy="{sharing}"{extra}/>'
    )


def platform_xml(spec: dict, p: int) -> str:
    """The SimGrid platform of ``spec`` for p hosts h0..h(p-1) (see the module doc)."""
    bw, lat, topology = spec["bandwidth"], spec["latency"], spec["topology"]
    head = '<?xml version=\'1.0\'?>\n<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">\n<platform version="4.1">\n'
    if topology in ("crossbar", "switch"):
        body = _cluster("c", 0, p - 1, bw, lat, "SPLITDUPLEX")
    elif topology.startswith("torus"):  # torus2d, torus3d, torus: the dims' count
        dims = ",".join(str(d) for d in reversed(spec["dims"]))  # SimGrid's first dimension varies fastest
        limiter = f' limiter_link="{bw!r}Bps"' if spec.get("limiter") else ""  # one link both ways (module doc)
        body = _cluster("c", 0, p - 1, bw, lat, "SPLITDUPLEX", f' topology="TORUS" topo_parameters="{dims}"{limiter}')
    elif topology == "dragonfly":  # one chassis a group: SimGrid's routing between chassis adds a hop (see docs)
        size, routers = spec["router_size"], spec["group_size"]
        groups = -(-p // (size * routers))
        levels = f"{groups},{spec.get('global_links', 1)};1,1;{routers},{spec.get('local_links', 1)};{size}"
        body = _cluster("c", 0, groups * routers * size - 1, bw, lat, "SPLITDUPLEX",
                        f' topology="DRAGONFLY" topo_parameters="{levels}"')  # fmt: skip
    elif topology == "fattree" and spec.get("routing", "trunk") == "static":
        body = _fat_tree_cluster(spec, p)
    elif topology == "fattree":
        body = _fattree(spec, p)
    else:
        raise ValueError(f"simgrid_oracle: unknown topology {topology!r}")
    return head + body + "\n</platform>\n"


def _fattree(spec: dict, p: int) -> str:
    bw, lat, size = spec["bandwidth"], spec["latency"], spec["leaf_size"]
    leaves = -(-p // size)
    trunk = size * bw / spec["oversubscription"]
    lines = ['<zone id="spine" routing="Full">']
    for i in range(leaves):
        lines.append(_cluster(f"leaf{i}", i * size, min(p, (i + 1) * size) - 1, bw, lat, "SPLITDUPLEX"))
        lines.append(f'<link id="trunk{i}" bandwidth="{trunk!r}Bps" latency="{lat!r}s" sharing_policy="SPLITDUPLEX"/>')
    for i in range(leaves):
        for j in range(leaves):
            if i != j:
                lines.append(
                    f'<zoneRoute src="leaf{i}" dst="leaf{j}" gw_src="hleaf{i}_router" gw_dst="hleaf{j}_router" '
                    f'symmetrical="NO"><link_ctn id="trunk{i}" direction="UP"/>'
                    f'<link_ctn id="trunk{j}" direction="DOWN"/></zoneRoute>'
                )
    lines.append("</zone>")
    return "\n".join(lines)


def _fat_tree_cluster(spec: dict, p: int) -> str:
    """SimGrid's FAT_TREE cluster (its D-mod-K routing): leaves of leaf_size hosts with leaf_size / oversubscription
    uplinks, and with pod_size, pods of that many leaves whose spines have pod_size / spine_oversubscription
    uplinks; hosts past p (to fill the last leaf or pod) run nothing."""
    size = spec["leaf_size"]
    leaves = -(-p // size)
    down, up = [size, leaves], [1, round(size / spec["oversubscription"])]
    if spec.get("pod_size"):
        down = [size, spec["pod_size"], -(-leaves // spec["pod_size"])]
        up.append(round(spec["pod_size"] / spec.get("spine_oversubscription", 1.0)))
    hosts = 1
    for children in down:
        hosts *= children
    levels = f"{len(down)};{','.join(map(str, down))};{','.join(map(str, up))};{','.join('1' * len(down))}"
    return _cluster("c", 0, hosts - 1, spec["bandwidth"], spec["latency"], "SPLITDUPLEX",
                    f' topology="FAT_TREE" topo_parameters="{levels}"')  # fmt: skip


def rank_actor(rows: list, rank: int, gamma: float, finish: list):
    import simgrid

    def box(src: int, dst: int, tag: int, context: int):
        return simgrid.Mailbox.by_name(f"{src}>{dst}:{tag}:{context}")

    def play():
        pending = {}
        for code, peer, tag, nbytes, source, recvtag, _, request, context in rows:
            if code == REDUCE:
                if nbytes:
                    simgrid.this_actor.execute(nbytes * gamma * SPEED)
            elif code == SEND:
                box(rank, peer, tag, context).put(rank, nbytes)
            elif code == RECV:
                box(peer, rank, tag, context).get()
            elif code == SENDRECV:
                out = box(rank, peer, tag, context).put_async(rank, nbytes)
                comm, _ = box(source, rank, recvtag, context).get_async()
                out.wait()
                comm.wait()
            elif code == ISEND:
                pending[request] = box(rank, peer, tag, context).put_async(rank, nbytes)
            elif code == IRECV:  # the pair (comm, data holder): SimGrid aborts if the holder dies before the wait
                pending[request] = box(peer, rank, tag, context).get_async()
            elif code == WAIT:
                comm = pending.pop(request)
                (comm[0] if isinstance(comm, tuple) else comm).wait()
        finish[rank] = simgrid.Engine.clock

    return play


def simulate(job: dict) -> float:
    """The slowest rank's virtual seconds for ``job`` (the module doc's JSON)."""
    import simgrid

    traces = job["traces"]
    engine = simgrid.Engine([sys.argv[0], *CONFIG])
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(platform_xml(job["platform"], len(traces)))
    try:
        engine.load_platform(f.name)
    finally:
        os.unlink(f.name)
    finish = [0.0] * len(traces)
    for rank, rows in enumerate(traces):
        simgrid.Actor.create(
            f"rank{rank}", simgrid.Host.by_name(f"h{rank}"), rank_actor(rows, rank, job["gamma"], finish)
        )
    engine.run()
    return max(finish)


if __name__ == "__main__":
    job = json.load(sys.stdin)
    cpu = time.process_time()
    virtual = simulate(job)
    print(json.dumps({"time": virtual, "cpu_s": time.process_time() - cpu}))  # cpu_s: SimGrid's run, all threads
