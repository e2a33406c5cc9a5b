"""gradcheck's failure message (issue 32, item 6): "analytic 1, numeric 0.1257" for a logsumexp whose backward
ignores its incoming gradient left a student puzzled, since neither number is the output's own derivative. The
message says that gradcheck weights the outputs with random numbers, and which output and which input disagree."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
from minidl.autograd import Function
from minidl.gradcheck import GradcheckError, gradcheck


class LogSumExpIgnoringGrad(Function):
    """logsumexp over the last axis whose backward returns softmax, forgetting to multiply by the incoming gradient."""

    def forward(self, a):
        m = a.max(axis=-1, keepdims=True)
        e = np.exp(a - m)
        self.save_for_backward(e / e.sum(axis=-1, keepdims=True))
        return (m + np.log(e.sum(axis=-1, keepdims=True)))[..., 0]

    def backward(self, g):
        (softmax,) = self.saved_tensors
        return softmax  # the bug: softmax * g[..., None]


class LogSumExp(LogSumExpIgnoringGrad):
    def backward(self, g):
        (softmax,) = self.saved_tensors
        return softmax * g[..., None]


@pytest.fixture
def x():
    return minidl.tensor(np.random.default_rng(0).standard_normal((3, 4)), name="logits")


def test_the_message_says_the_outputs_are_weighted_with_random_numbers(x):
    assert gradcheck(lambda a: LogSumExp.apply(a), [x])  # the right backward passes
    with pytest.raises(GradcheckError) as info:
        gradcheck(lambda a: LogSumExpIgnoringGrad.apply(a), [x], seed=3)
    msg = str(info.value)
    assert msg.startswith("gradcheck failed for 'logits' (input 0), shape (3, 4), at index (0, 0), through fn's output")
    assert "through fn's output (shape (3,)):" in msg
    assert "weights each output with random numbers R (standard normal, seed 3)" in msg
    assert "derivatives of sum(output * R)" in msg


@pytest.mark.parametrize("wrong", [0, 1])
def test_the_message_names_the_output_that_disagrees(x, wrong):
    def fn(a):
        outputs = [LogSumExp.apply(a), (a * a).sum(axis=0)]
        outputs[wrong] = (
            LogSumExpIgnoringGrad.apply(a) if wrong == 0 else outputs[wrong] + LogSumExpIgnoringGrad.apply(a).sum()
        )
        return tuple(outputs)

    with pytest.raises(GradcheckError) as info:
        gradcheck(fn, [x])
    shape = (3,) if wrong == 0 else (4,)
    assert f"through fn's output {wrong} (shape {shape}) of 2:" in str(info.value)


def test_a_large_input_names_the_output_along_the_random_direction():
    big = np.random.default_rng(1).standard_normal((50, 60))
    with pytest.raises(GradcheckError) as info:
        gradcheck(lambda a: (a.tanh(), LogSumExpIgnoringGrad.apply(a)), [big], max_elementwise=100)
    msg = str(info.value)
    assert "along a random direction, through fn's output 1 (shape (50,)) of 2:" in msg
