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
