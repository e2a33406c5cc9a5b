"""LSTMCell and LSTM against PyTorch on the same weights: forward, every gradient, state_dict both ways."""

import numpy as np
import pytest

import minidl
from minidl import nn

torch = pytest.importorskip("torch")


def _to_torch_state(module):
    return {k: torch.from_numpy(v.copy()) for k, v in module.state_dict().items()}


def _from_torch_state(tmodule):
    return {k: v.detach().numpy().copy() for k, v in tmodule.state_dict().items()}


def _mt(a):
    return minidl.tensor(a, requires_grad=True)


def _tt(a):
    return torch.tensor(a, requires_grad=True)


def test_lstmcell_matches_torch(rng):
    minidl.set_default_dtype(np.float64)
    B, I, H = 3, 5, 4
    cell = nn.LSTMCell(I, H)
    tcell = torch.nn.LSTMCell(I, H).double()
    tcell.load_state_dict(_to_torch_state(cell), strict=True)
    x, h, c = (rng.standard_normal(s) for s in [(B, I), (B, H), (B, H)])
    rh, rc = rng.standard_normal((B, H)), rng.standard_normal((B, H))

    mx, mh, mc = _mt(x), _mt(h), _mt(c)
    h1, c1 = cell(mx, (mh, mc))
    ((h1 * rh).sum() + (c1 * rc).sum()).backward()
    tx, th, tc = _tt(x), _tt(h), _tt(c)
    th1, tc1 = tcell(tx, (th, tc))
    ((th1 * torch.from_numpy(rh)).sum() + (tc1 * torch.from_numpy(rc)).sum()).backward()

    np.testing.assert_allclose(h1.data, th1.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(c1.data, tc1.detach().numpy(), atol=1e-12)
    for m, t in [(mx, tx), (mh, th), (mc, tc)]:
        np.testing.assert_allclose(m.grad, t.grad.numpy(), atol=1e-12)
    tparams = dict(tcell.named_parameters())
    for name, p in cell.named_parameters():
        np.testing.assert_allclose(p.grad, tparams[name].grad.numpy(), atol=1e-12, err_msg=name)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_lstm_two_layers_matches_torch(rng, dtype, tol):
    minidl.set_default_dtype(dtype)
    T, B, I, H, L = 7, 3, 5, 6, 2
    lstm = nn.LSTM(I, H, num_layers=L)
    tlstm = torch.nn.LSTM(I, H, num_layers=L).to(torch.float64 if dtype == np.float64 else torch.float32)
    tlstm.load_state_dict(_to_torch_state(lstm), strict=True)
    x, h0, c0 = (rng.standard_normal(s).astype(dtype) for s in [(T, B, I), (L, B, H), (L, B, H)])
    r_out, r_h, r_c = (rng.standard_normal(s).astype(dtype) for s in [(T, B, H), (L, B, H), (L, B, H)])

    mx, mh, mc = _mt(x), _mt(h0), _mt(c0)
    out, (h, c) = lstm(mx, (mh, mc))
    ((out * r_out).sum() + (h * r_h).sum() + (c * r_c).sum()).backward()
    tx, th, tc = _tt(x), _tt(h0), _tt(c0)
    tout, (tho, tco) = tlstm(tx, (th, tc))
    R = [torch.from_numpy(r) for r in (r_out, r_h, r_c)]
    ((tout * R[0]).sum() + (tho * R[1]).sum() + (tco * R[2]).sum()).backward()

    for m, t in [(out, tout), (h, tho), (c, tco)]:
        np.testing.assert_allclose(m.data, t.detach().numpy(), atol=tol)
    for m, t in [(mx, tx), (mh, th), (mc, tc)]:
        np.testing.assert_allclose(m.grad, t.grad.numpy(), atol=tol)
    tparams = dict(tlstm.named_parameters())
    assert sorted(tparams) == sorted(n for n, _ in lstm.named_parameters())
    for name, p in lstm.named_parameters():
        np.testing.assert_allclose(p.grad, tparams[name].grad.numpy(), atol=tol, err_msg=name)


def test_state_dict_round_trip_both_ways():
    lstm = nn.LSTM(4, 3, num_layers=2)
    tlstm = torch.nn.LSTM(4, 3, num_layers=2)
    # torch -> minidl
    lstm.load_state_dict(_from_torch_state(tlstm), strict=True)
    for name, value in _from_torch_state(tlstm).items():
        np.testing.assert_array_equal(lstm.state_dict()[name], value)
    # minidl -> torch (after changing minidl's weights, so the copy is not a no-op)
    lstm.init_uniform(0.1)
    tlstm.load_state_dict(_to_torch_state(lstm), strict=True)
    for name, value in lstm.state_dict().items():
        np.testing.assert_array_equal(tlstm.state_dict()[name].numpy(), value)
    cell, tcell = nn.LSTMCell(4, 3), torch.nn.LSTMCell(4, 3)
    cell.load_state_dict(_from_torch_state(tcell), strict=True)
    tcell.load_state_dict(_to_torch_state(cell), strict=True)
    for name, value in cell.state_dict().items():
        np.testing.assert_array_equal(tcell.state_dict()[name].numpy(), value)


def test_no_bias_matches_torch(rng):
    minidl.set_default_dtype(np.float64)
    lstm = nn.LSTM(3, 4, bias=False)
    tlstm = torch.nn.LSTM(3, 4, bias=False).double()
    tlstm.load_state_dict(_to_torch_state(lstm), strict=True)
    x = rng.standard_normal((5, 2, 3))
    out, _ = lstm(minidl.tensor(x))
    tout, _ = tlstm(torch.from_numpy(x))
    np.testing.assert_allclose(out.data, tout.detach().numpy(), atol=1e-12)


def _run_both(lstm, tlstm, x, state, rng):
    """Forward and backward of both on the same input/state (float64); returns ours and theirs, each
    (out, h_n, c_n, grads of x, h0, c0, grads of every parameter by name)."""
    mx, th = _mt(x), _tt(x)
    m_state = None if state is None else tuple(_mt(s) for s in state)
    t_state = None if state is None else tuple(_tt(s) for s in state)
    results = []
    for module, inp, st, wrap in ((lstm, mx, m_state, minidl.tensor), (tlstm, th, t_state, torch.from_numpy)):
        out, (h, c) = module(inp, st)
        r = [np.random.default_rng(1).standard_normal(tuple(a.shape)) for a in (out, h, c)]
        ((out * wrap(r[0])).sum() + (h * wrap(r[1])).sum() + (c * wrap(r[2])).sum()).backward()
        leaves = [inp] + ([] if st is None else list(st))
        grads = [np.asarray(g.grad if isinstance(g.grad, np.ndarray) else g.grad.numpy()) for g in leaves]
        pgrads = {
            n: np.asarray(p.grad if isinstance(p.grad, np.ndarray) else p.grad.numpy())
            for n, p in module.named_parameters()
        }
        vals = [np.asarray(a.data if isinstance(a, minidl.Tensor) else a.detach().numpy()) for a in (out, h, c)]
        results.append((vals, grads, pgrads))
    return results


@pytest.mark.parametrize("num_layers, batch_first, with_state", [(1, False, False), (2, False, True), (3, True, True)])
def test_bidirectional_matches_torch(rng, num_layers, batch_first, with_state):
    """bidirectional=True: PyTorch's names (weight_ih_l0_reverse, ...), output [T, B, 2H], h/c [2L, B, H]."""
    minidl.set_default_dtype(np.float64)
    T, B, I, H = 5, 3, 4, 3
    lstm = nn.LSTM(I, H, num_layers=num_layers, batch_first=batch_first, bidirectional=True)
    tlstm = torch.nn.LSTM(I, H, num_layers=num_layers, batch_first=batch_first, bidirectional=True).double()
    assert list(lstm.state_dict()) == list(tlstm.state_dict())
    tlstm.load_state_dict(_to_torch_state(lstm), strict=True)
    x = rng.standard_normal((B, T, I) if batch_first else (T, B, I))
    state = tuple(rng.standard_normal((2 * num_layers, B, H)) for _ in range(2)) if with_state else None
    (ours, our_grads, our_p), (theirs, their_grads, their_p) = _run_both(lstm, tlstm, x, state, rng)
    assert ours[0].shape == ((B, T, 2 * H) if batch_first else (T, B, 2 * H)) and ours[1].shape == (
        2 * num_layers,
        B,
        H,
    )
    for a, b in zip(ours + our_grads, theirs + their_grads):
        np.testing.assert_allclose(a, b, atol=1e-12)
    for name, g in their_p.items():
        np.testing.assert_allclose(our_p[name], g, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_unbatched_input_matches_torch(rng, bidirectional):
    """x [T, I] (no batch axis), state [L*D, H]: as PyTorch, batch_first does not apply."""
    minidl.set_default_dtype(np.float64)
    T, I, H, L = 6, 4, 3, 2
    D = 2 if bidirectional else 1
    lstm = nn.LSTM(I, H, num_layers=L, bidirectional=bidirectional, batch_first=True)
    tlstm = torch.nn.LSTM(I, H, num_layers=L, bidirectional=bidirectional, batch_first=True).double()
    tlstm.load_state_dict(_to_torch_state(lstm), strict=True)
    state = tuple(rng.standard_normal((L * D, H)) for _ in range(2))
    (ours, our_grads, our_p), (theirs, their_grads, their_p) = _run_both(
        lstm, tlstm, rng.standard_normal((T, I)), state, rng
    )
    assert ours[0].shape == (T, D * H) and ours[1].shape == (L * D, H)
    for a, b in zip(ours + our_grads, theirs + their_grads):
        np.testing.assert_allclose(a, b, atol=1e-12)
    for name, g in their_p.items():
        np.testing.assert_allclose(our_p[name], g, atol=1e-12, err_msg=name)


def test_bidirectional_weights_load_from_torch(rng):
    tlstm = torch.nn.LSTM(3, 2, num_layers=2, bidirectional=True)
    lstm = nn.LSTM(3, 2, num_layers=2, bidirectional=True)
    lstm.load_state_dict(_from_torch_state(tlstm))
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    out, _ = lstm(minidl.tensor(x))
    np.testing.assert_allclose(out.data, tlstm(torch.from_numpy(x))[0].detach().numpy(), atol=1e-6)


def test_lstmcell_unbatched_and_dtype_match_torch(rng):
    cell = nn.LSTMCell(4, 3, dtype=np.float64)
    assert all(p.dtype == np.float64 for p in cell.parameters())
    tcell = torch.nn.LSTMCell(4, 3, dtype=torch.float64)
    tcell.load_state_dict(_to_torch_state(cell), strict=True)
    x, h, c = rng.standard_normal(4), rng.standard_normal(3), rng.standard_normal(3)
    ours = cell(minidl.tensor(x), (minidl.tensor(h), minidl.tensor(c)))
    theirs = tcell(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
    for a, b in zip(ours, theirs):
        assert a.shape == (3,)
        np.testing.assert_allclose(a.data, b.detach().numpy(), atol=1e-12)
    assert nn.LSTM(2, 3, dtype=np.float64).weight_ih_l0.dtype == np.float64
