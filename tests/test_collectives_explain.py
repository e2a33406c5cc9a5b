"""collectives.explain: the step-by-step table is read off the real code's messages, and ring.py's worked
table is that output."""

import io

import numpy as np
import pytest

import collectives
from collectives import walkthrough as ex
from collectives.common import TAG_ALLGATHER, TAG_REDUCE_SCATTER


def test_ring_docstring_table_is_what_the_code_sends():
    text = collectives.explain("ring", p=4, n=8, file=None)
    doc_lines = [line.strip() for line in collectives.ring.__doc__.splitlines()]
    for line in text.splitlines():
        assert line.strip() in doc_lines, line


def test_ring_table_matches_the_message_record():
    # each (step, rank) cell names the block and the ranks the message's bytes hold, decoded independently
    p, n = 4, 8
    xs = ex.rank_vectors(p, n)
    res = collectives.simulate(p, lambda comm: collectives.ring.allreduce(comm, xs[comm.Get_rank()]), record_data=True)
    assert all(np.array_equal(out, np.sum(xs, axis=0)) for out in res)
    rows = collectives.explain("ring", p, n, file=None).splitlines()[2:-1]
    assert len(rows) == 2 * (p - 1)
    for m in res.messages:
        values = np.frombuffer(m.data, np.int64)
        ranks = {int(v) & (2**p - 1) for v in values}
        assert len(ranks) == 1
        s = m.step  # 0-based step s: rank r sends block r-s-1 (reduce-scatter) or r-s+2 (allgather, s >= 3)
        block = (m.source - s - 1) % p if m.tag == TAG_REDUCE_SCATTER else (m.source - (s - (p - 1))) % p
        assert m.tag in (TAG_REDUCE_SCATTER, TAG_ALLGATHER)
        cell = f"b{block}={'+'.join(f'x{r}' for r in range(p) if (int(values[0]) >> r) & 1)} -> {m.dest}"
        assert cell in rows[s], (s, cell, rows[s])
        if m.tag == TAG_REDUCE_SCATTER:
            # the partial sum of block b at step s covers the s + 1 ranks that held it so far
            assert bin(int(values[0]) & (2**p - 1)).count("1") == s + 1


@pytest.mark.parametrize("algorithm", list(ex.SCHEDULES))
@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_explain_every_algorithm(algorithm, p):
    out = io.StringIO()
    text = collectives.explain(algorithm, p=p, n=2 * p + 1, file=out)
    assert out.getvalue().strip() == text
    res = collectives.simulate(p, lambda comm: ex.SCHEDULES[algorithm](comm, np.ones(2 * p + 1), np.add))
    steps = {m.step for m in res.messages}
    assert len(text.splitlines()) == len(steps) + 3  # title, column heads, one line a step, the end
    assert "mixed" not in text


def test_explain_refuses_what_it_cannot_encode():
    with pytest.raises(ValueError, match="unknown algorithm"):
        collectives.explain("butterfly")
    with pytest.raises(ValueError, match="p <= 24"):
        collectives.explain("ring", p=30)


def test_explain_draws_a_users_function_and_says_where_it_goes_wrong():
    def forgets_to_add(comm, x, f):  # passes x round the ring but never reduces what arrives
        r, p = comm.Get_rank(), comm.Get_size()
        out, tmp = x.copy(), np.empty_like(x)
        for _ in range(p - 1):
            comm.Sendrecv(out, (r + 1) % p, 0, tmp, (r - 1) % p, 0)
            out[...] = tmp
        return out

    text = collectives.explain(forgets_to_add, p=3, n=3, file=None)
    assert text.splitlines()[0].startswith("forgets_to_add() allreduce, p = 3, n = 3")
    assert "b0-2=x0 -> 1" in text  # step 1: rank 0 sends its whole vector right
    assert "WRONG: rank 0 ends with x1 at element 0, where x0+...+x2 belongs" in text
    assert "afterwards every rank holds" not in text


def test_explain_reports_a_deadlock_and_other_collectives():
    def sends_first(comm, x, f):
        comm.Send(x, (comm.Get_rank() + 1) % comm.Get_size())
        return x

    assert "did not complete: DeadlockError" in collectives.explain(sends_first, p=2, n=2, file=None)
    text = collectives.explain(collectives.tree.broadcast_into, p=4, n=2, file=None, collective="broadcast")
    assert "step   1: 0->2 x0[0:2]" in text and "1->3" not in text
