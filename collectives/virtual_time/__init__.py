"""The virtual-time cluster: how long would a collective take on p ranks of a given network?

Nothing here runs in parallel. Each rank's calls are recorded by running the real collective code
alone against a size-only communicator, then played against a model of the network in virtual time.

    trace.py      each rank's calls (send, recv, reduce, ...) from the real code, size-only buffers
    replay.py     the traces played as MPI matches them, in virtual seconds (``allreduce_time``)
    rounds.py     the same for lockstep schedules, a round at a time with NumPy (p in the thousands)
    network.py    links, clusters and named presets ("10gbe", "ib-hdr", ...); topology.py: the wiring
    flows.py      messages sharing a link share it max-min fairly
    calibrate.py  alpha, beta, gamma measured on this machine (``python -m collectives.virtual_time.calibrate``)

minidl.simulate builds on it to time whole training steps.
"""
