"""Where a training step's time goes, and how far its matrix products run from the machine's sgemm rate.

``OpClock`` times the ``forward`` and ``backward`` of every autograd Function (minidl/autograd.py) in CPU
seconds while it is active, and counts the flops of the GEMM-bound ones from their shapes:

    convolution, linear, matmul   forward 2 * out.size * K   (K: the weight's fan-in, C/G * kh * kw or in_features;
                                  a matmul's inner dimension); backward the same once per input gradient wanted
                                  (dx and dW), so 3x the forward in training
    LSTM layer (T, B, I -> H)     forward 2 T B 4H (I + H);  backward 2 T B 4H (I (dx + dW_ih) + H (dh + dW_hh))

Each GEMM-bound piece (one op at one shape, forward and backward together) is then a rate, GFLOP/s, and a
fraction of the sgemm rate measured in the same process (``minidl.tools.info.sgemm_gflops``): the physical limit of
that piece on this core. The rest of the step is the other ops by name (batch norm, ReLU, cross-entropy, ...)
and what runs outside any op (the optimizer, the autograd engine, Python).

    peak = sgemm_gflops()
    with OpClock() as clock:
        t0 = time.process_time(); step(); clock.step_seconds += time.process_time() - t0
    print("\\n".join(clock.lines(peak, steps=1)))

An op called from inside another op's forward or backward is counted in the outer one.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from minidl.autograd import Function

CONV = ("Conv2dFunction", "ImplicitConv2dFunction", "GemmConv2dFunction", "PolyphaseConv2dFunction")


def _conv_piece(args: tuple, out: Any) -> tuple[str, float]:
    x, w = args[0], args[1]
    stride = max(1, round(x.shape[-1] / out.shape[-1]))
    label = f"conv {w.shape[2]}x{w.shape[3]}{' s' + str(stride) if stride > 1 else ''} {x.shape[1]}->{w.shape[0]}"
    return f"{label} at {out.shape[-2]}x{out.shape[-1]}", 2.0 * out.size * int(np.prod(w.shape[1:]))


def _linear_piece(args: tuple, out: Any) -> tuple[str, float]:
    x, w = args[0], args[1]
    return f"linear [{x.size // x.shape[-1]}, {w.shape[1]}] -> {w.shape[0]}", 2.0 * out.size * w.shape[1]


def _matmul_piece(args: tuple, out: Any) -> tuple[str, float]:
    a, b = args[0], args[1]
    return f"matmul {list(a.shape)} @ {list(b.shape)}", 2.0 * np.size(out) * a.shape[-1]


def _lstm_piece(args: tuple, out: Any) -> tuple[str, float]:
    x, w_hh = args[0], args[4]
    (T, B, I), H = x.shape, w_hh.shape[1]
    return f"LSTM layer T={T} B={B} {I}->{H}", 2.0 * T * B * 4 * H * (I + H)


PIECES: dict[str, Callable[[tuple, Any], tuple[str, float]]] = {
    **dict.fromkeys(CONV, _conv_piece),
    "LinearFunction": _linear_piece,
    "MatMul": _matmul_piece,
    "LSTMFunction": _lstm_piece,
}


def backward_flops(fn: Function, args_shapes: tuple, forward: float) -> float:
    """The flops of ``fn``'s backward, from its forward's and the gradients it was asked for."""
    need = fn.needs_input_grad
    if type(fn).__name__ == "LSTMFunction":  # x, h0, c0, w_ih, w_hh: the dh products always run
        (T, B, I), H = args_shapes
        return 2.0 * T * B * 4 * H * (I * (need[0] + need[3]) + H * (1 + need[4]))
    return forward * (int(need[0]) + int(need[1]))


def _function_classes() -> list[type]:
    found, todo = [], [Function]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


class OpClock:
    """Times every Function's forward and backward (CPU seconds) while active; see the module docstring."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.flops: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.step_seconds = 0.0
        self._depth = 0
        self._patched: list[tuple[type, str, Any]] = []

    def __enter__(self) -> OpClock:
        for cls in _function_classes():
            for name in ("forward", "backward"):
                if name in cls.__dict__:
                    self._patched.append((cls, name, cls.__dict__[name]))
                    setattr(cls, name, self._timed(cls, name, cls.__dict__[name]))
        return self

    def __exit__(self, *exc: Any) -> None:
        for cls, name, original in reversed(self._patched):
            setattr(cls, name, original)
        self._patched.clear()

    def _timed(self, cls: type, name: str, method: Callable) -> Callable:
        piece = PIECES.get(cls.__name__)

        def timed(fn: Function, *args: Any, **kwargs: Any) -> Any:
            if self._depth:  # inside another op: counted there
                return method(fn, *args, **kwargs)
            self._depth += 1
            t0 = time.process_time()
            try:
                out = method(fn, *args, **kwargs)
            finally:
                self._depth -= 1
            seconds = time.process_time() - t0
            if name == "forward":
                label, flops = piece(args, out) if piece else (cls.__name__, 0.0)
                shapes = (args[0].shape, args[4].shape[1]) if cls.__name__ == "LSTMFunction" else ()
                fn._clock = (label, flops, shapes)
                self.calls[label] += 1
            else:
                label, forward, shapes = getattr(fn, "_clock", (cls.__name__, 0.0, ()))
                flops = backward_flops(fn, shapes, forward) if forward else 0.0
            self.seconds[label] += seconds
            self.flops[label] += flops
            return out

        return timed

    def lines(self, peak_gflops: float, steps: int) -> list[str]:
        """The report: each GEMM-bound piece (ms per step, GFLOP/s, % of ``peak_gflops``), their total and share
        of the step, the other ops by time, and the rest (outside any op). ``steps``: steps the clock ran over."""
        step_ms = 1e3 * self.step_seconds / steps
        gemm = sorted((k for k in self.seconds if self.flops[k] > 0), key=lambda k: -self.seconds[k])
        other = sorted((k for k in self.seconds if self.flops[k] == 0), key=lambda k: -self.seconds[k])
        out = [f"step {step_ms:.1f} ms (CPU), sgemm peak {peak_gflops:.1f} GFLOP/s measured in this process:"]
        for k in gemm:
            rate = self.flops[k] / self.seconds[k] / 1e9
            out.append(
                f"  {k:<34} x{self.calls[k] // steps:<3} {1e3 * self.seconds[k] / steps:8.1f} ms "
                f"{rate:6.1f} GFLOP/s {100 * rate / peak_gflops:4.0f}% of peak"
            )
        g_s, g_f = sum(self.seconds[k] for k in gemm), sum(self.flops[k] for k in gemm)
        o_s = sum(self.seconds[k] for k in other)
        rate = g_f / g_s / 1e9 if g_s else 0.0
        out.append(
            f"  GEMM-bound ops {1e3 * g_s / steps:.1f} ms ({100 * g_s / self.step_seconds:.0f}% of the step) at "
            f"{rate:.1f} GFLOP/s ({100 * rate / peak_gflops:.0f}% of peak); at peak they would take "
            f"{1e3 * g_f / peak_gflops / 1e9 / steps:.1f} ms"
        )
        shown = ", ".join(f"{k} {1e3 * self.seconds[k] / steps:.1f}" for k in other[:6])
        out.append(f"  other ops {1e3 * o_s / steps:.1f} ms ({100 * o_s / self.step_seconds:.0f}%): {shown} ms")
        rest = self.step_seconds - g_s - o_s
        out.append(f"  outside the ops (optimizer, autograd, Python) {1e3 * rest / steps:.1f} ms")
        return out


def split_report(step: Callable[[int], Any], steps: int, first: int = 0) -> list[str]:
    """Measure the sgemm peak here, run ``step(first + i)`` for ``steps`` steps under an ``OpClock``, and return
    its report: what ``--split`` of cnn.py and lstm_lm.py prints."""
    from minidl.tools.info import sgemm_gflops

    peak = sgemm_gflops()
    with OpClock() as clock:
        for i in range(steps):
            t0 = time.process_time()
            step(first + i)
            clock.step_seconds += time.process_time() - t0
    return clock.lines(peak, steps)
