# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # 01 - Reverse-mode automatic differentiation, from the graph up
#
# Every number a neural network computes is the end of a chain of small operations. minidl records that
# chain as it runs: each operation is a `Function` (see `minidl/ops/`) with a `forward` on NumPy arrays and,
# right beside it, a `backward` that turns the gradient of its output into gradients of its inputs (the
# chain rule, one link at a time). `loss.backward()` then visits the Functions from the loss back to the
# inputs.
#
# In this lesson we
# 1. build the graph of a small expression and print it;
# 2. walk it backward by hand and compare with `backward()`;
# 3. see why the *order* of that walk matters (a diamond graph);
# 4. check gradients numerically with `minidl.gradcheck`;
# 5. train a tiny two-layer network with plain gradient descent.
#
# Run it as a script (`python tutorials/01_autograd.py`, add `--quick` for a seconds-long run) or open it
# as a notebook with Jupytext.

# %%

import numpy as np

import minidl
import minidl.nn.functional as F
from minidl.tools import tutorial

QUICK = tutorial.quick()  # --quick or MINIDL_QUICK=1 (how a notebook is told)
minidl.set_default_dtype(np.float64)  # float64 throughout: exact comparisons with hand-made gradients
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. The graph of an expression
#
# Take a single neuron with a squared-error loss:
#
# $$z = w x + b, \qquad y = \tanh(z), \qquad L = (y - t)^2 .$$
#
# Each tensor made by an op remembers the Function that made it (`_ctx`), and each Function remembers its
# inputs (`parents`). Following those links from `L` gives the whole graph.

# %%
x = minidl.tensor(0.5, name="x")
w = minidl.tensor(-1.5, requires_grad=True, name="w")
b = minidl.tensor(0.3, requires_grad=True, name="b")
t = minidl.tensor(0.8, name="t")

z = w * x + b
z.name = "z"
y = z.tanh()
y.name = "y"
L = (y - t) ** 2
L.name = "L"


def label(tensor: minidl.Tensor) -> str:
    if tensor.name:
        return tensor.name
    return f"({type(tensor._ctx).__name__})" if tensor._ctx is not None else "const"


def print_graph(root: minidl.Tensor) -> None:
    """Print each Function once, with the labels and values of its inputs (an iterative walk, no recursion)."""
    seen, stack = set(), [root]
    while stack:
        out = stack.pop()
        fn = out._ctx
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        args = ", ".join(f"{label(p)}={p.item():.4f}" for p in fn.parents)
        print(f"{label(out):>7} = {type(fn).__name__}({args})")
        stack.extend(fn.parents)


print_graph(L)

# %% [markdown]
# The same graph as a picture: `minidl.tools.viz.graph` reads the same links and draws each Function as a box with its
# output's shape and dtype, each leaf as an ellipse (green: it requires grad; dashed: a constant). It uses
# graphviz's `dot` program when it is installed, and matplotlib otherwise; `minidl.tools.viz.to_dot(L)` gives the text
# that `dot` draws from.

# %%
from minidl.tools import viz  # noqa: E402


def draw_graph(root: minidl.Tensor, name: str, **options) -> None:
    """The autograd graph of ``root``, saved under tutorials/out (inline in a notebook)."""
    try:
        tutorial.show_file(viz.graph(root, tutorial.out_dir() / name, **options).path)
    except ImportError:  # neither graphviz nor matplotlib here: the text dot would draw from
        print(viz.to_dot(root, **options))


draw_graph(L, "01_autograd_graph_neuron.png")

# %% [markdown]
# ## 2. Backward by hand
#
# The chain rule, from the loss back, one Function at a time:
#
# $$\frac{\partial L}{\partial y} = 2 (y - t), \quad
#   \frac{\partial L}{\partial z} = \frac{\partial L}{\partial y} (1 - y^2), \quad
#   \frac{\partial L}{\partial w} = \frac{\partial L}{\partial z} x, \quad
#   \frac{\partial L}{\partial b} = \frac{\partial L}{\partial z}.$$

# %%
dL_dy = 2 * (y.item() - t.item())
dL_dz = dL_dy * (1 - y.item() ** 2)
by_hand = {"w": dL_dz * x.item(), "b": dL_dz}

L.backward()
print(f"by hand:  dL/dw = {by_hand['w']:+.6f}   dL/db = {by_hand['b']:+.6f}")
print(f"autograd: dL/dw = {w.grad.item():+.6f}   dL/db = {b.grad.item():+.6f}")
assert np.isclose(w.grad, by_hand["w"]) and np.isclose(b.grad, by_hand["b"])

# %% [markdown]
# ## 3. Why the order of the walk matters
#
# When a value is used twice, its gradient is the **sum** of what flows back along both uses. A Function may
# run its backward only once that sum is complete, i.e. after every Function that consumed its output.
# A *topological order* of the graph (consumers before producers) guarantees it.
#
# Here is a diamond: `a` feeds both `p` and `q`, which meet again in `d`.
#
# $$a = 3x,\quad p = a^2,\quad q = \exp(a) \cdot 0.1 ,\quad d = p + q ,
#   \qquad \frac{\partial d}{\partial x} = 3\,(2a + 0.1 e^{a}).$$
#
# A naive depth-first walk that runs each Function's backward the first time it reaches it will handle `a`'s
# Function while coming down the `p` branch, before `q` has reported. It silently drops a term.


# %%
def diamond():
    x = minidl.tensor(0.7, requires_grad=True, name="x")
    a = x * 3.0
    p = a * a
    q = a.exp() * 0.1
    return x, a, p + q


def naive_dfs_backward(root: minidl.Tensor) -> None:
    """WRONG on purpose: backward of each Function at its first visit, depth first."""
    grads = {id(root._ctx): np.ones_like(root.data)}
    visited = set()
    stack = [root._ctx]
    while stack:
        fn = stack.pop()
        if id(fn) in visited:
            continue
        visited.add(id(fn))
        in_grads = fn.backward(grads.pop(id(fn)))
        in_grads = in_grads if isinstance(in_grads, tuple) else (in_grads,)
        for parent, g in zip(fn.parents, in_grads):
            if g is None or not parent.requires_grad:
                continue
            if parent._ctx is None:
                parent.grad = g if parent.grad is None else parent.grad + g
            else:
                key = id(parent._ctx)
                grads[key] = grads.get(key, 0) + g
                stack.append(parent._ctx)


x_naive, a_val, d_naive = diamond()
naive_dfs_backward(d_naive)
x_topo, _, d_topo = diamond()
d_topo.backward()  # minidl: reverse topological order, each Function once, after all its consumers

exact = 3 * (2 * a_val.item() + 0.1 * np.exp(a_val.item()))
print(f"exact          dd/dx = {exact:.6f}")
print(f"naive DFS      dd/dx = {x_naive.grad.item():.6f}   <- misses a branch")
print(f"topological    dd/dx = {x_topo.grad.item():.6f}")
assert not np.isclose(x_naive.grad, exact) and np.isclose(x_topo.grad, exact)

# %% [markdown]
# minidl computes the order with an iterative depth-first search that appends a Function only after all of
# its inputs' Functions are done (a post-order), then reverses the list. Here it is for the diamond:

# %%
from minidl.autograd import topological_order  # noqa: E402

_, _, d = diamond()
print(" -> ".join(type(fn).__name__ for fn in topological_order(d._ctx)))

# %% [markdown]
# ## 4. Checking gradients numerically
#
# A backward is only as good as its derivation. The central difference
# $\big(f(x + \epsilon e_i) - f(x - \epsilon e_i)\big) / 2\epsilon$ approximates each partial derivative with
# error $O(\epsilon^2)$; `minidl.gradcheck` compares it with the analytic gradient in float64, along a random
# direction and element by element, and names the input and index that disagree.

# %%
A = rng.standard_normal((3, 4))
B = rng.standard_normal((4, 2))
print(
    "softmax(A @ B) * logsumexp(A):",
    minidl.gradcheck(lambda A, B: (A @ B).softmax(axis=1) * A.logsumexp(axis=1, keepdims=True), [A, B]),
)


class BadSquare(minidl.Function):
    """x**2 with the factor 2 forgotten in backward."""

    def forward(self, a):
        self.save_for_backward(a)
        return a * a

    def backward(self, g):
        (a,) = self.saved_tensors
        return g * a


try:
    minidl.gradcheck(lambda v: BadSquare.apply(v), [rng.standard_normal(3)])
except minidl.GradcheckError as err:
    print("caught:", err)

# %% [markdown]
# **Exercise 1** (`python -m minidl.exercises start logsumexp`): write LogSumExp as a `minidl.Function` of
# your own, a forward that cannot overflow and its backward (the softmax). The checker runs `gradcheck` on it
# in float64 and names the smallest input where it breaks:
# `python -m minidl.exercises check logsumexp`.

# %% [markdown]
# ## 5. Training a tiny model with plain gradient descent
#
# Two interleaved spirals in the plane (two turns each), two classes. A two-layer perceptron
# $\text{logits} = \tanh(X W_1 + b_1) W_2 + b_2$, the softmax cross-entropy loss, and the update
# $\theta \leftarrow \theta - \eta \nabla_\theta L$, done on `.data` so the update itself builds no graph.


# %%
def spirals(n_per_class: int, turns: float = 2.0, noise: float = 0.15):
    r = np.linspace(0.3, 1.0, n_per_class)
    angle = np.linspace(0, turns * np.pi, n_per_class)
    xs, ys = [], []
    for label_, shift in ((0, 0.0), (1, np.pi)):
        pts = np.stack([r * np.cos(angle + shift), r * np.sin(angle + shift)], axis=1)
        xs.append(pts + noise * rng.standard_normal(pts.shape) * r[:, None] / 3)
        ys.append(np.full(n_per_class, label_))
    return np.concatenate(xs), np.concatenate(ys)


X, Y = spirals(100)
hidden = 32
# Large random first-layer weights and biases: the tanh units start as varied "ridges" across the plane.
W1 = minidl.tensor(rng.standard_normal((2, hidden)) * 3.0, requires_grad=True, name="W1")
b1 = minidl.tensor(rng.standard_normal(hidden) * 1.5, requires_grad=True, name="b1")
W2 = minidl.tensor(rng.standard_normal((hidden, 2)) / np.sqrt(hidden), requires_grad=True, name="W2")
b2 = minidl.tensor(np.zeros(2), requires_grad=True, name="b2")
params = [W1, b1, W2, b2]


def model(inputs):
    return (minidl.tensor(inputs) @ W1 + b1).tanh() @ W2 + b2


# %% [markdown]
# The graph one forward pass of this model records, from the two inputs and four parameters to the loss. The
# first op, `MatMul`, has the whole batch as its first input: 200 points of 2 coordinates.

# %%
draw_graph(F.cross_entropy(model(X), Y), "01_autograd_graph_mlp.png", params=dict(W1=W1, b1=b1, W2=W2, b2=b2))

# %%
steps, lr = (300, 1.0) if QUICK else (2000, 1.0)
for step in range(steps + 1):
    loss = F.cross_entropy(model(X), Y)
    for p in params:
        p.grad = None
    loss.backward()
    for p in params:
        p.data -= lr * p.grad
    if step % (steps // 5) == 0:
        accuracy = (model(X).data.argmax(axis=1) == Y).mean()
        print(f"step {step:5d}  loss {loss.item():.4f}  accuracy {accuracy:.2f}")

final_accuracy = (model(X).data.argmax(axis=1) == Y).mean()
assert final_accuracy > 0.95, final_accuracy

# %% [markdown]
# The decision regions, if matplotlib is installed (saved to a file, not shown):

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None

if plt is not None:
    grid = np.linspace(-1.3, 1.3, 120)
    gx, gy = np.meshgrid(grid, grid)
    with minidl.no_grad():
        region = model(np.stack([gx.ravel(), gy.ravel()], axis=1)).data.argmax(axis=1).reshape(gx.shape)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.contourf(gx, gy, region, alpha=0.25, cmap="coolwarm")
    ax.scatter(X[:, 0], X[:, 1], c=Y, cmap="coolwarm", s=12, edgecolors="k", linewidths=0.3)
    ax.set_title(f"two-layer MLP, {steps} GD steps, accuracy {final_accuracy:.2f}")
    tutorial.show(fig, "01_autograd_spirals.png")  # inline in a notebook, saved under tutorials/out

# %% [markdown]
# ## What to take away
# - The graph is recorded as the forward runs; each op's backward is a few lines beside its forward.
# - Gradients of a value used twice add up; the reverse topological order makes sure they have all arrived.
# - Check every new backward numerically (`minidl.gradcheck`) before trusting it.
# - Training is just: forward, `backward()`, step against the gradient, repeat.
