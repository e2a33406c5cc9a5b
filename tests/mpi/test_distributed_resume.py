"""Under mpiexec: k steps, checkpoint, resume for k more == 2k uninterrupted, bitwise.

The LSTM LM here has dropout, so each rank's random generator (its dropout masks) and each rank's
hidden state (carried over its own streams) must come back exactly; the LR schedule and SGD's
momentum too. The run is done three times in one job: straight through, first half, resumed half.
"""

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import optim
from minidl.data.text import batchify, bptt_batches
from minidl.models.lm import LSTMLanguageModel
from minidl.random import default_generator

VOCAB, HIDDEN, BATCH, BPTT, STEPS = 17, 8, 2, 5, 4


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def run(comm, ckpt, steps, resume=False, save_at=None):
    dist.init(comm)
    minidl.manual_seed(1000 + dist.rank())  # each rank its own dropout masks, as in real training
    model = LSTMLanguageModel(VOCAB, HIDDEN, 2, dropout=0.3, init_scale=0.2)
    opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=1.0, momentum=0.5), allreduce="ring")
    sched = optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    ids = np.random.default_rng(0).integers(0, VOCAB, size=2000)
    windows = list(bptt_batches(batchify(ids, BATCH, dist.rank(), dist.size()), BPTT))
    state, step = None, 0
    if resume:
        shared, mine = dist.load_checkpoint(ckpt, model, opt, sched)
        step = shared["step"]
        dist.set_rng_state(default_generator(), mine["rng"])
        state = (minidl.tensor(mine["h"]), minidl.tensor(mine["c"]))
    else:
        dist.broadcast_parameters(model)
    while step < steps:
        x, y = windows[step]
        opt.zero_grad()
        logits, state = model(x, state)
        state = model.detach_state(state)
        F.cross_entropy(logits, y.reshape(-1)).backward()
        opt.synchronize()
        optim.clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step == save_at:
            dist.save_checkpoint(
                ckpt,
                model,
                opt,
                sched,
                state={"step": step},
                rank_state={"rng": dist.rng_state(default_generator()), "h": state[0].data, "c": state[1].data},
            )
    return model.state_dict()


def test_resume_is_bitwise(comm, tmp_path_factory):
    # rank 0 writes; every rank must name the same file
    path = str(tmp_path_factory.mktemp("ckpt") / "lm.npz") if comm.Get_rank() == 0 else ""
    path = dist.broadcast_state({"p": path}, comm=comm)["p"]
    straight = run(comm, path, 2 * STEPS)
    first = run(comm, path, STEPS, save_at=STEPS)
    resumed = run(comm, path, 2 * STEPS, resume=True)
    for k in straight:
        assert resumed[k].tobytes() == straight[k].tobytes(), f"rank {comm.Get_rank()}: {k} differs after resume"
    assert any(not np.array_equal(first[k], straight[k]) for k in straight)
