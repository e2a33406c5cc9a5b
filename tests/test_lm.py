"""The Zaremba et al. (2014) LSTM language model: presets, shapes, truncated BPTT, and that it learns."""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.models import PRESETS, LSTMLanguageModel
from minidl.random import manual_seed


def test_presets_match_the_paper():
    small, medium, large = PRESETS["small"], PRESETS["medium"], PRESETS["large"]
    assert (small.num_layers, small.hidden_size, small.num_steps, small.batch_size) == (2, 200, 20, 20)
    assert (small.lr, small.epochs, small.decay_after, small.lr_decay) == (1.0, 13, 4, 0.5)
    assert (small.max_grad_norm, small.init_scale, small.dropout) == (5.0, 0.1, 0.0)
    assert (medium.hidden_size, medium.num_steps, medium.dropout, medium.epochs) == (650, 35, 0.5, 39)
    assert (medium.decay_after, medium.init_scale) == (6, 0.05)
    assert medium.lr_decay == pytest.approx(1 / 1.2)
    assert (large.hidden_size, large.num_steps, large.dropout, large.epochs) == (1500, 35, 0.65, 55)
    assert (large.decay_after, large.init_scale, large.max_grad_norm) == (14, 0.04, 10.0)
    assert large.lr_decay == pytest.approx(1 / 1.15)
    assert all(c.vocab_size == 10_000 and c.num_layers == 2 for c in PRESETS.values())
    # lr is constant for the first decay_after epochs, then decays once per epoch
    assert [small.lr_at(e) for e in (1, 4, 5, 6, 13)] == [1.0, 1.0, 0.5, 0.25, 0.5**9]


def test_from_config_builds_the_preset():
    model = LSTMLanguageModel.from_config("small", vocab_size=50)
    shapes = {n: p.shape for n, p in model.named_parameters()}
    assert shapes["embedding.weight"] == (50, 200)
    assert shapes["lstm.weight_ih_l1"] == (800, 200)
    assert shapes["decoder.weight"] == (50, 200)
    assert all(np.abs(p.data).max() <= 0.1 for p in model.parameters())  # uniform(-0.1, 0.1)
    with pytest.raises(KeyError, match="unknown LM preset"):
        LSTMLanguageModel.from_config("huge")


def test_forward_shapes_and_truncated_bptt(rng):
    model = LSTMLanguageModel(vocab_size=11, hidden_size=6, num_layers=2)
    x = rng.integers(0, 11, size=(5, 3))
    logits, (h, c) = model(x)
    assert logits.shape == (15, 11) and logits.dtype == np.float32
    assert h.shape == c.shape == (2, 3, 6)
    detached = model.detach_state((h, c))
    assert detached[0]._ctx is None and not detached[0].requires_grad
    np.testing.assert_array_equal(detached[0].data, h.data)
    # the second window's loss backpropagates into the parameters but not into the first window
    logits2, _ = model(x, detached)
    F.cross_entropy(logits2, x.reshape(-1)).backward()
    assert all(p.grad is not None for p in model.parameters())
    with pytest.raises(ValueError, match="integer token ids"):
        model(rng.standard_normal((5, 3)))


def _repeating_corpus(n: int) -> np.ndarray:
    """0 1 0 2 0 3 0 1 ...: after a 0 the next word is fixed by the word before the 0, so a bigram model
    is left with log(3)/2 = 0.55 nats per word, and only a model with memory gets below it."""
    return np.tile([0, 1, 0, 2, 0, 3], n // 6 + 1)[:n]


def test_tiny_lm_learns_beyond_bigrams():
    manual_seed(0)
    T, B, steps = 12, 4, 200
    stream = _repeating_corpus(B * 200).reshape(B, -1).T  # [N, B]: B parallel streams, as Zaremba batchifies
    model = LSTMLanguageModel(vocab_size=4, hidden_size=16, num_layers=2)  # PyTorch's default init
    opt = optim.SGD(model.parameters(), lr=1.0)
    state = model.init_hidden(B)
    losses = []
    for i in range(steps):
        start = (i * T) % (stream.shape[0] - T - 1)
        if start < T:
            state = model.init_hidden(B)
        x, y = stream[start : start + T], stream[start + 1 : start + T + 1]
        logits, state = model(x, model.detach_state(state))
        loss = F.cross_entropy(logits, y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm(list(model.parameters()), 5.0)
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[:5]) > 1.0  # starts near log(4) = 1.39
    assert np.mean(losses[-10:]) < 0.05  # far below the unigram (1.24) and bigram (0.55) floors


def test_dropout_only_in_training(rng):
    manual_seed(1)
    model = LSTMLanguageModel(vocab_size=7, hidden_size=5, num_layers=2, dropout=0.5)
    x = rng.integers(0, 7, size=(4, 2))
    model.eval()
    a, _ = model(x)
    b, _ = model(x)
    np.testing.assert_array_equal(a.data, b.data)
    model.train()
    c, _ = model(x)
    assert not np.allclose(a.data, c.data)


def test_matches_torch_equivalent(rng):
    torch = pytest.importorskip("torch")
    minidl.set_default_dtype(np.float64)
    V, H, T, B = 9, 5, 4, 3
    model = LSTMLanguageModel(vocab_size=V, hidden_size=H, num_layers=2)

    class TorchLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(V, H)
            self.lstm = torch.nn.LSTM(H, H, 2)
            self.decoder = torch.nn.Linear(H, V)

        def forward(self, x):
            out, _ = self.lstm(self.embedding(x))
            return self.decoder(out.reshape(-1, H))

    tmodel = TorchLM().double()
    tmodel.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()}, strict=True)
    x, y = rng.integers(0, V, size=(T, B)), rng.integers(0, V, size=(T * B,))
    logits, _ = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    tloss = torch.nn.functional.cross_entropy(tmodel(torch.from_numpy(x)), torch.from_numpy(y))
    tloss.backward()
    assert loss.item() == pytest.approx(tloss.item(), abs=1e-12)
    tgrads = {n: p.grad.numpy() for n, p in tmodel.named_parameters()}
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad, tgrads[name], atol=1e-12, err_msg=name)


def test_units_chain_is_the_model_and_carries_the_state():
    """Running LSTMLanguageModel.units() in order is forward: the same logits, dropout masks and gradients,
    with the LSTM state carried inside the Recurrent units across windows (truncated BPTT)."""
    from minidl.models.lm import Recurrent

    rng = np.random.default_rng(0)
    windows = [rng.integers(0, 13, size=(4, 3)) for _ in range(3)]

    def run(chain: bool):
        minidl.manual_seed(5)
        model = LSTMLanguageModel(13, 6, num_layers=3, dropout=0.3, init_scale=0.3)
        units = [u for _, u in model.units()]
        net, state, outs = nn.Sequential(*units), None, []
        for x in windows:
            if chain:
                for u in units:
                    if isinstance(u, Recurrent):
                        u.start_window()
                logits = net(x)
            else:
                logits, state = model(x, None if state is None else model.detach_state(state))
            logits.sum().backward()
            outs.append(logits.data)
        names = [n for n, _ in model.units()]
        return outs, {k: p.grad for k, p in model.named_parameters()}, names, sorted(net.state_dict())

    dense, chain = run(False), run(True)
    for a, b in zip(dense[0], chain[0]):
        np.testing.assert_array_equal(a, b)
    for k in dense[1]:
        np.testing.assert_array_equal(dense[1][k], chain[1][k], err_msg=k)
    assert chain[2] == [""] * 5  # the units hold the model's own names
    model = LSTMLanguageModel(13, 6, num_layers=3)
    assert sorted(k.split(".", 1)[1] for k in chain[3]) == sorted(model.state_dict())
