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
