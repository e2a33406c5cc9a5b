"""Ranks that disagree never train silently, and no rank waits forever without a word (issue 11).

One test (or more) per numbered case of the issue, on the simulated communicator with a short
timeout, so a regression shows as a failure, never as a hung test run. The cases that need real
MPI processes (MPMD command lines, an abort before ``dist.init``) are in ``test_ranks_disagree_cli.py``.
Cases 11 (autograd version counters) and 13 (full-shape agreement check) are tested where they
are built (tests/test_tensor_core.py and the collectives' tests).
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
from minidl import nn, optim
from minidl.distributed.timeout import CommTimeoutError

collectives = pytest.importorskip("collectives")

TIMEOUT = 2.0  # seconds a simulated rank may wait before it says so


def on_every_rank(P, fn, *args):
    """Run fn(comm, *args) on P simulated ranks; return what each rank raised (type, message), or its result."""

    def wrapped(comm, *a):
        try:
            return ("ok", fn(comm, *a))
        except Exception as e:  # noqa: BLE001 - the test inspects every rank's error
            return (type(e).__name__, str(e))

    return collectives.simulate(P, wrapped, *args, timeout=60)


def tiny_model(seed=0, sizes=((4, 6), (6, 4))):
    minidl.manual_seed(seed)
    return nn.Sequential(*[nn.Linear(i, o) for i, o in sizes])


def train_steps(model, opt, steps, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    for _ in range(steps):
        opt.zero_grad()
        x = minidl.tensor(rng.standard_normal((3, 4)))
        (model(x) ** 2).mean().backward()
        opt.step()


# ----------------------------------------------------------------------------- 1. different numbers of steps
def test_1_ranks_taking_different_numbers_of_steps_time_out_naming_step_and_peer():
    def fn(comm):
        dist.init(comm, timeout=TIMEOUT)
        model = tiny_model()
        opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1))
        train_steps(model, opt, 3 + comm.Get_rank())

    results = on_every_rank(2, fn)
    assert results[0][0] == "ok"
    kind, message = results[1]
    assert kind == "CommTimeoutError", results
    assert "DistributedOptimizer.step at step 3" in message and "rank 0" in message, message


def test_1_sampler_over_different_dataset_sizes_fails_on_every_rank():
    def fn(comm):
        dist.init(comm)
        return len(dist.DistributedSampler(100 + 10 * comm.Get_rank(), batch_size=4))

    results = on_every_rank(3, fn)
    assert all(kind == "MismatchError" for kind, _ in results), results
    assert all("n=100" in m and "n=120" in m for _, m in results), results


def test_1_sampler_gives_every_rank_the_same_number_of_batches():
    for n in range(1, 40):
        lengths = {len(list(dist.DistributedSampler(n, 4, drop_last=False, rank=r, size=3))) for r in range(3)}
        assert len(lengths) == 1, (n, lengths)


# ----------------------------------------------------------------------------- 2. parameters in another order
class TwoWeights(nn.Module):
    def __init__(self, swap):
        super().__init__()
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
        if swap:  # same names, same shapes, declared in the other order
            self.b, self.a = nn.Parameter(b), nn.Parameter(a)
        else:
            self.a, self.b = nn.Parameter(a), nn.Parameter(b)


@pytest.mark.parametrize("where", ["broadcast_parameters", "DistributedOptimizer"])
def test_2_parameters_declared_in_another_order_fail_on_every_rank(where):
    def fn(comm):
        dist.init(comm)
        model = TwoWeights(swap=comm.Get_rank() == 1)
        if where == "broadcast_parameters":
            dist.broadcast_parameters(model)
        else:
            dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())

    results = on_every_rank(3, fn)
    assert all(kind == "MismatchError" for kind, _ in results), results
    assert len({m for _, m in results}) == 1  # the same words on every rank
    message = results[0][1]
    assert "parameter 0" in message and "'a'" in message and "'b'" in message and "[1]" in message, message


def test_2_parameter_server_with_parameters_in_another_order_fails():
    def fn(comm):
        dist.init(comm)
        model = TwoWeights(swap=comm.Get_rank() == 2)
        if dist.is_server(comm, 1):
            dist.ParameterServer(model, lambda ps: optim.SGD(ps, lr=0.1), comm, 1).serve()
        else:
            worker = dist.PSWorker(model, comm, 1)
            worker.close()

    results = on_every_rank(3, fn)
    assert all(kind == "MismatchError" for kind, _ in results), results
    assert "parameter 0" in results[0][1]


# ----------------------------------------------------------------------------- 3. same size, other architecture
def test_3_architectures_with_the_same_parameter_count_fail_on_every_rank():
    def fn(comm):
        dist.init(comm)
        sizes = ((6, 4), (4, 6)) if comm.Get_rank() == 0 else ((4, 6), (6, 4))
        model = tiny_model(sizes=sizes)
        opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1))
        rng = np.random.default_rng(0)
        opt.zero_grad()
        (model(minidl.tensor(rng.standard_normal((2, sizes[0][0])))) ** 2).mean().backward()
        opt.step()

    results = on_every_rank(2, fn)
    assert all(kind == "MismatchError" for kind, _ in results), results
    assert "parameter 0" in results[0][1] and "(4, 6)" in results[0][1] and "(6, 4)" in results[0][1]


# ----------------------------------------------------------------------------- 4. optimizer hyperparameters
@pytest.mark.parametrize("case", ["lr", "class", "local_sgd"])
def test_4_optimizers_that_differ_fail_on_every_rank(case):
    def fn(comm):
        dist.init(comm)
        model = tiny_model()
        r = comm.Get_rank()
        if case == "class":
            inner = optim.SGD(model.parameters(), lr=0.001) if r == 0 else optim.Adam(model.parameters(), lr=0.001)
        else:
            inner = optim.SGD(model.parameters(), lr=0.1 * (r + 1))
        if case == "local_sgd":
            dist.LocalSGD(inner, average_every=2)
        else:
            dist.DistributedOptimizer(inner)

    results = on_every_rank(2, fn)
    assert all(kind == "MismatchError" for kind, _ in results), results
    expected = "optimizer" if case == "class" else "group 0 lr"
    assert expected in results[0][1], results


# ----------------------------------------------------------------------------- 5. fp16 overflow
def test_5_fp16_compression_divides_before_casting():
    def fn(comm):
        dist.init(comm)
        p = nn.Parameter(np.zeros(3, np.float32))
        opt = dist.DistributedOptimizer(optim.SGD([p], lr=1.0), compression="fp16")
        p.grad = np.full(3, 40000.0, np.float32)  # the fp16 sum of two would be 80000 > 65504: inf
        opt.step()
        return p.data.copy()

    for out in collectives.simulate(2, fn):
        np.testing.assert_allclose(out, -40000.0, rtol=1e-3)


def test_5_fp16_overflow_after_the_allreduce_raises_naming_the_bucket():
    def fn(comm):
        dist.init(comm)
        p = nn.Parameter(np.zeros(3, np.float32))
        opt = dist.DistributedOptimizer(optim.SGD([p], lr=1.0), compression="fp16")
        p.grad = np.full(3, 60000.0 * (comm.Get_rank() + 1), np.float32)
        opt.step()

    results = on_every_rank(2, fn)
    assert all(kind == "FloatingPointError" for kind, _ in results), results
    assert "bucket 0" in results[0][1] and "fp16" in results[0][1]


# ----------------------------------------------------------------------------- 6. add_param_group on one rank
def test_6_add_param_group_on_one_rank_does_not_hang():
    def fn(comm):
        dist.init(comm, timeout=TIMEOUT)
        model = tiny_model()
        opt = dist.DistributedOptimizer(optim.SGD(list(model.parameters())[:2], lr=0.1))
        train_steps(model, opt, 1)
        if comm.Get_rank() == 1:
            opt.add_param_group({"params": list(model.parameters())[2:]})
        train_steps(model, opt, 1)

    results = on_every_rank(2, fn)
    assert all(kind in ("MismatchError", "StepMismatchError") for kind, _ in results), results  # not a timeout
    assert "add_param_group" in results[1][1] and "optimizer step 2" in results[1][1], results


def test_6_add_param_group_on_every_rank_is_checked():
    def fn(comm):
        dist.init(comm)
        model = tiny_model()
        opt = dist.DistributedOptimizer(optim.SGD(list(model.parameters())[:2], lr=0.1))
        opt.add_param_group({"params": list(model.parameters())[2:], "lr": 0.01 * (comm.Get_rank() + 1)})

    results = on_every_rank(2, fn)
    assert all(kind == "MismatchError" for kind, _ in results), results
    assert "group 1 lr" in results[0][1]


# ----------------------------------------------------------------------------- 7. Adam checkpoint into SGD
def test_7_adam_checkpoint_does_not_load_into_sgd(tmp_path):
    path = tmp_path / "adam.npz"

    def fn(comm, make):
        dist.init(comm)
        model = tiny_model()
        opt = make(model.parameters())
        if make is adam:
            train_steps(model, opt, 1)
            dist.save_checkpoint(path, model, opt)
        else:
            dist.load_checkpoint(path, model, opt)
            return opt.param_groups[0]["lr"]

    def adam(ps):
        return optim.Adam(ps, lr=0.001)

    def sgd(ps):
        return optim.SGD(ps, lr=0.1)

    collectives.simulate(2, fn, adam)
    results = on_every_rank(2, fn, sgd)
    assert all(kind == "ValueError" and "another optimizer" in m for kind, m in results), results


# ----------------------------------------------------------------------------- 9. malformed checkpoint manifests
def write_manifest(path, manifest):
    with zipfile.ZipFile(path, "w") as z:
        buf = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
        import io

        f = io.BytesIO()
        np.save(f, buf)
        z.writestr("__minidl_manifest__.npy", f.getvalue())


MALFORMED = {
    "items not a list": {"format": "minidl.checkpoint", "version": 1, "tree": {"type": "dict", "items": 3}},
    "item not a triple": {"format": "minidl.checkpoint", "version": 1, "tree": {"type": "dict", "items": [[1]]}},
    "missing entry": {
        "format": "minidl.checkpoint",
        "version": 1,
        "tree": {"type": "dict", "items": [["model", "str", {"type": "ndarray"}]]},
    },
    "deep": {
        "format": "minidl.checkpoint",
        "version": 1,
        "tree": json.loads('{"type":"list","items":[' * 400 + "]}" * 400),
    },
    "root is a list": {"format": "minidl.checkpoint", "version": 1, "tree": {"type": "list", "items": []}},
    "version text": {"format": "minidl.checkpoint", "version": "2", "tree": {"type": "none"}},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_9_malformed_checkpoint_raises_one_error_on_every_rank(tmp_path, case):
    path = tmp_path / "bad.npz"
    write_manifest(path, MALFORMED[case])
    if case != "root is a list":
        with pytest.raises(minidl.CheckpointError, match="bad.npz"):
            minidl.load(path)

    def fn(comm):
        dist.init(comm, timeout=TIMEOUT)
        dist.load_checkpoint(path, tiny_model(), comm=comm)

    results = on_every_rank(3, fn)
    kinds = {kind for kind, _ in results}
    assert kinds <= {"CheckpointError", "ValueError"}, results
    assert len({m for _, m in results}) == 1 and "bad.npz" in results[0][1], results


# ----------------------------------------------------------------------------- 12. recv with another dtype
def test_12_recv_with_another_dtype_of_the_same_size_is_refused():
    def fn(comm):
        dist.init(comm)
        if comm.Get_rank() == 0:
            with minidl.no_grad():
                dist.send(np.arange(4, dtype=np.float64), 1)
        else:
            with minidl.no_grad():
                return dist.recv((4,), np.int64, 0)

    results = on_every_rank(2, fn)
    assert results[1][0] == "ValueError" and "float64" in results[1][1] and "int64" in results[1][1], results


def test_12_recv_with_another_shape_of_the_same_size_is_refused():
    def fn(comm):
        dist.init(comm)
        with minidl.no_grad():
            if comm.Get_rank() == 0:
                dist.send(np.zeros((2, 3)), 1)
            else:
                return dist.recv((3, 2), np.float64, 0)

    results = on_every_rank(2, fn)
    assert results[1][0] == "ValueError" and "(2, 3)" in results[1][1] and "(3, 2)" in results[1][1], results


# ----------------------------------------------------------------------------- the timeout itself
def test_timeout_is_off_by_default_and_read_from_the_environment(monkeypatch):
    from minidl.distributed.timeout import ENV, TimeoutComm, timeout_from_env

    monkeypatch.delenv(ENV, raising=False)
    assert timeout_from_env() is None
    monkeypatch.setenv(ENV, "45")
    assert timeout_from_env() == 45.0
    monkeypatch.setenv(ENV, "off")
    assert timeout_from_env(300.0) is None
    monkeypatch.setenv(ENV, "-3")
    with pytest.raises(ValueError, match=ENV):
        timeout_from_env()

    def fn(comm):
        monkeypatch.setenv(ENV, "7")
        c = dist.init(comm)
        return isinstance(c, TimeoutComm) and c.seconds == 7.0

    assert collectives.simulate(2, fn) == [True, True]


def test_timeout_wrapper_gives_the_same_results_as_the_bare_communicator():
    def fn(comm, wrap):
        c = dist.init(comm, timeout=30.0 if wrap else None)
        x = np.arange(1000.0) * (comm.Get_rank() + 1)
        outs = [collectives.allreduce(c, x, algorithm=a) for a in ("ring", "tree", "recursive_doubling")]
        c.Barrier()
        sub = c.Split(comm.Get_rank() % 2)
        outs.append(collectives.allreduce(sub, x, algorithm="ring"))
        return outs

    for P in (2, 3, 5):
        for a, b in zip(collectives.simulate(P, fn, True), collectives.simulate(P, fn, False)):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)


def test_a_rank_that_never_arrives_raises_naming_the_call_and_the_peer():
    def fn(comm):
        c = dist.init(comm, timeout=0.3)
        if comm.Get_rank() == 2:
            return "left early"
        with dist.timeout.activity("my loop", step=7):
            collectives.allreduce(c, np.ones(8), algorithm="ring")

    results = on_every_rank(3, fn)
    assert results[2] == ("ok", "left early")
    for kind, message in results[:2]:
        assert kind == "CommTimeoutError", results
        assert "my loop at step 7" in message and "rank" in message and "MINIDL_COMM_TIMEOUT" in message


def test_comm_timeout_error_is_a_timeout_error():
    assert issubclass(CommTimeoutError, TimeoutError)


@pytest.mark.parametrize("stage", [1, 3])
def test_2_3_4_zero_compares_the_layout_too(stage):
    def fn(comm):
        dist.init(comm)
        swap = comm.Get_rank() == 1
        model = TwoWeights(swap=swap)
        dist.ZeroOptimizer(optim.SGD(model.parameters(), lr=0.1), stage=stage, module=model)

    results = on_every_rank(2, fn)
    assert all(kind == "MismatchError" for kind, _ in results), results
    assert "ZeroOptimizer" in results[0][1] and "parameter 0" in results[0][1]


def test_5_fp16_overflow_skips_the_update_when_asked():
    def fn(comm):
        dist.init(comm)
        p = nn.Parameter(np.zeros(3, np.float32))
        opt = dist.DistributedOptimizer(optim.SGD([p], lr=1.0), compression="fp16", overflow="skip")
        p.grad = np.full(3, 60000.0 * (comm.Get_rank() + 1), np.float32)
        opt.step()
        p.grad = np.ones(3, np.float32)
        opt.step()
        return p.data.copy(), opt.skipped

    for data, skipped in collectives.simulate(2, fn):
        assert skipped == 1
        np.testing.assert_array_equal(data, -1.0)  # the overflowed update skipped, the next one applied


def test_1_a_worker_that_vanishes_times_out_the_parameter_server():
    def fn(comm):
        comm = dist.init(comm, timeout=TIMEOUT)  # the TimeoutComm
        model = TwoWeights(swap=False)
        if dist.is_server(comm, 1):
            dist.ParameterServer(model, lambda ps: optim.SGD(ps, lr=0.1), comm, 1, asynchronous=True).serve()
        elif comm.Get_rank() == 1:
            dist.PSWorker(model, comm, 1, asynchronous=True).close()
        else:
            dist.PSWorker(model, comm, 1, asynchronous=True)  # returns without close(): as if it died

    results = on_every_rank(3, fn)
    kind, message = results[0]
    assert kind == "CommTimeoutError" and "ParameterServer.serve" in message, results
