"""Builders of tests/test_distributed_equivalence.py, shared with the tests under mpiexec (tests/mpi)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.data.text import batchify, bptt_batches
from minidl.models.lm import LSTMLanguageModel

collectives = pytest.importorskip("collectives")

ALGORITHMS = ["ring", "tree", "naive", "recursive_doubling", "rabenseifner", "auto"]
STEPS = 3
RTOL = 1e-8

# ----------------------------------------------------------------------------- the two model families
VOCAB, HIDDEN, LAYERS, BPTT, LM_BATCH = 13, 6, 2, 4, 2


def make_lm() -> nn.Module:
    return LSTMLanguageModel(VOCAB, HIDDEN, LAYERS, dropout=0.0, init_scale=0.3)


def make_cnn(batchnorm: bool = False) -> nn.Module:
    layers = [nn.Conv2d(2, 3, 3, padding=1)]
    if batchnorm:
        layers.append(nn.BatchNorm2d(3))
    layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3 * 2 * 2, 4)]
    return nn.Sequential(*layers)


CNN_BATCH, CNN_N = 2, 48
MODELS = {
    "lm": make_lm,
    # 64 rows of which the corpus uses the first VOCAB: an embedding gradient with few non-zero rows
    "lm_sparse": lambda: LSTMLanguageModel(64, HIDDEN, LAYERS, dropout=0.0, init_scale=0.3, sparse_embedding=True),
    "cnn": make_cnn,
    "cnn_syncbn": lambda: make_cnn(batchnorm=True),
}


def lm_corpus(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, size=600)


def image_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((CNN_N, 2, 4, 4)), rng.integers(0, 4, size=CNN_N)


def initial_state(kind: str) -> dict[str, np.ndarray]:
    minidl.manual_seed(1234)
    return MODELS[kind]().state_dict()


# ----------------------------------------------------------------------------- one training run
def train(kind: str, init: dict, steps: int, comm=None, algorithm: str = "ring", world: int = 1, **dist_kw):
    """``steps`` SGD steps of model ``kind`` from ``init``; returns the final state_dict.

    With ``comm`` (a rank of a data-parallel job): batch b per rank, a DistributedOptimizer, rank 0's
    ``init`` broadcast to all. Without: one process with batch ``world * b``.
    """
    model = MODELS[kind]()
    rank, size = 0, 1
    if comm is not None:
        dist.init(comm)
        rank, size = dist.rank(), dist.size()
        if kind == "cnn_syncbn":
            model = dist.convert_sync_batchnorm(model, algorithm=algorithm if algorithm != "mpi" else "ring")
        if rank == 0:
            model.load_state_dict(init)
        dist.broadcast_parameters(model, root=0)
    else:
        model.load_state_dict(init)
    base = optim.SGD(model.parameters(), lr=0.5, momentum=0.9, weight_decay=1e-3)
    opt = base
    if comm is not None:
        dist_kw.setdefault("fusion_bytes", 1024)  # several buckets even for these tiny models
        opt = dist.DistributedOptimizer(base, allreduce=algorithm, **dist_kw)
    if kind.startswith("lm"):
        _train_lm(model, opt, steps, rank, size if comm is not None else 1, world)
    else:
        _train_cnn(model, opt, steps, rank, size if comm is not None else 1, world)
    return model.state_dict()


def _sync_and_clip(model, opt, max_norm):
    if isinstance(opt, dist.DistributedOptimizer):
        opt.synchronize()  # clipping must see the averaged gradients
    optim.clip_grad_norm(model.parameters(), max_norm)


def _train_lm(model, opt, steps, rank, size, world):
    b = LM_BATCH if size > 1 else LM_BATCH * world
    data = batchify(lm_corpus(), b, rank, size)
    state = None
    for i, (x, y) in enumerate(bptt_batches(data, BPTT)):
        if i == steps:
            break
        opt.zero_grad()
        logits, state = model(x, state)
        state = model.detach_state(state)
        F.cross_entropy(logits, y.reshape(-1)).backward()
        _sync_and_clip(model, opt, 0.5)  # 0.5: small enough that clipping really happens
        opt.step()


def _train_cnn(model, opt, steps, rank, size, world):
    x, y = image_data()
    b = CNN_BATCH if size > 1 else CNN_BATCH * world
    sampler = dist.DistributedSampler(CNN_N, b, seed=5, rank=rank, size=size)
    for i, idx in enumerate(sampler):
        if i == steps:
            break
        opt.zero_grad()
        F.cross_entropy(model(minidl.tensor(x[idx])), y[idx]).backward()
        opt.step()


def assert_same_state(got: dict, want: dict, rtol: float = RTOL, what: str = "") -> None:
    assert got.keys() == want.keys()
    for k in want:
        scale = max(float(np.max(np.abs(want[k]))), 1e-300) if want[k].size else 1.0
        err = float(np.max(np.abs(got[k] - want[k]))) / scale if want[k].size else 0.0
        assert err <= rtol, f"{what}{k}: relative difference {err:.3g} > {rtol}"


def assert_replicas_identical(states: list[dict]) -> None:
    for r, s in enumerate(states[1:], 1):
        for k in s:
            assert s[k].tobytes() == states[0][k].tobytes(), f"rank {r} differs from rank 0 in {k}"


# ----------------------------------------------------------------------------- the tests
pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64
