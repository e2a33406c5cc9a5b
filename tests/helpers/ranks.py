"""Errors that every simulated rank must raise alike (the agreement check's promise: never a hang, never one rank)."""

import collectives


def errors_on_every_rank(p, fn, exc_type=Exception):
    """Run fn on p simulated ranks; every rank must raise exc_type with the same message, which is returned."""

    def guarded(comm):
        try:
            fn(comm)
        except exc_type as e:
            return e
        return None

    res = collectives.simulate(p, guarded, timeout=20)
    assert all(isinstance(e, exc_type) for e in res), res
    assert len({str(e) for e in res}) == 1, [str(e) for e in res]  # the same message on every rank
    return str(res[0])


def on_every_rank(p, fn, *args):
    """Run fn(comm, *args) on p simulated ranks; what each returned ("ok", result) or raised (type name, message)."""

    def wrapped(comm, *a):
        try:
            return ("ok", fn(comm, *a))
        except Exception as e:  # noqa: BLE001 - the test inspects every rank's error
            return (type(e).__name__, str(e))

    return collectives.simulate(p, wrapped, *args, timeout=60)
