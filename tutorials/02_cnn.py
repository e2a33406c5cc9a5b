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
# # 02 - Convolutional networks: im2col, pooling, batch norm, and a ResNet on multi-label images
#
# A convolution slides a small filter over an image and takes a dot product at every position. Written as
# loops it is six nested `for`s and hopelessly slow in Python. The trick every CPU framework uses is
# **im2col**: copy every window of the image into a column of a matrix, then do *one* matrix product with
# the filters. This lesson
# 1. unfolds an image into its patches and checks that one matmul gives the convolution;
# 2. pools (max and average), and sees where max pooling sends its gradient;
# 3. normalizes a batch (batch norm): batch statistics in training, running statistics in evaluation;
# 4. trains a small ResNet on generated **multi-label** images (several shapes can be in one picture, like
#    several findings on one chest X-ray) and reads its per-label accuracy.
#
# `python tutorials/02_cnn.py` trains for a few minutes; `--quick` takes seconds. Figures go to `tutorials/out/`.

# %%

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.data.images import generated_images, make_shapes
from minidl.nn.im2col import im2col
from minidl.tools import tutorial
from minidl.train import cnn

QUICK = tutorial.quick()  # --quick or MINIDL_QUICK=1 (how a notebook is told)
minidl.set_default_dtype(np.float64)  # exact comparisons in sections 1-3
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. Convolution as im2col plus one matrix product
#
# For an input $x$ of shape $[N, C, H, W]$ and filters $w$ of shape $[O, C, k_h, k_w]$, stride $s$ and zero
# padding $p$,
#
# $$y[n, o, a, b] = \sum_{c, i, j} w[o, c, i, j]\; x_{\text{pad}}[n, c, i + s a, j + s b],
# \qquad OH = \frac{H + 2p - k_h}{s} + 1 .$$
#
# im2col builds `cols[n, (c, i, j), (a, b)] = x_pad[n, c, i + s a, j + s b]`: one column per output
# position, holding the $C k_h k_w$ pixels of its window. Then $y = w_{[O,\, C k_h k_w]} \cdot \text{cols}$.
# Here is a 24x24 picture with a circle and a cross, unfolded for a 4x4 filter with stride 4 (so the 36
# windows do not overlap and are easy to see):

# %%
K, G = 4, 6  # window size and windows per side
image, labels = make_shapes(
    1, size=K * G, noise=0.0, background=0.0, seed=5, p_present=1.0, classes=("circle", "cross")
)
x = image.astype(np.float64)  # [1, 1, 24, 24]
cols = im2col(x, (K, K), (K, K), (0, 0))  # [N, C, kh, kw, OH, OW] = [1, 1, 4, 4, 6, 6]
matrix = cols.reshape(K * K, G * G)  # one column per window
print("image", x.shape, "-> cols", cols.shape, "-> matrix [C*kh*kw, OH*OW] =", matrix.shape)

fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), gridspec_kw={"width_ratios": [1, 1, 2]})
axes[0].imshow(x[0, 0], cmap="gray")
for k in range(1, G):
    axes[0].axhline(K * k - 0.5, color="tab:red", lw=0.8)
    axes[0].axvline(K * k - 0.5, color="tab:red", lw=0.8)
axes[0].set_title(f"image, {K}x{K} windows")
patches = cols[0, 0].transpose(2, 3, 0, 1)  # [OH, OW, kh, kw]
grid = np.ma.masked_all(((K + 1) * G - 1, (K + 1) * G - 1))  # the patches with a one-pixel gap between them
for a in range(G):
    for b in range(G):
        grid[(K + 1) * a : (K + 1) * a + K, (K + 1) * b : (K + 1) * b + K] = patches[a, b]
axes[1].imshow(grid, cmap=plt.get_cmap("gray").with_extremes(bad="tab:blue"))
axes[1].set_title(f"the {G * G} patches")
axes[2].imshow(matrix, cmap="gray", aspect="auto")
axes[2].set_xlabel(f"window = output position (a * {G} + b)")
axes[2].set_ylabel(f"pixel in window (i * {K} + j)")
axes[2].set_title("im2col matrix: each patch is a column")
for ax in axes[:2]:
    ax.set_xticks([])
    ax.set_yticks([])
tutorial.show(fig, "02_im2col.png")

# %% [markdown]
# The convolution is then one product, and it equals both `F.conv2d` and the six loops of the definition
# (here with stride 1 and padding 1, the ResNet's 3x3 convolution):

# %%
N, C, H, W, O = 2, 3, 6, 6, 4
xs = rng.normal(size=(N, C, H, W))
ws = rng.normal(size=(O, C, 3, 3))
cols = im2col(xs, (3, 3), (1, 1), (1, 1)).reshape(N, C * 9, H * W)
y_im2col = (ws.reshape(O, -1) @ cols).reshape(N, O, H, W)
y_layer = F.conv2d(minidl.tensor(xs), minidl.tensor(ws), padding=1).data
xp = np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)))
y_loops = np.zeros((N, O, H, W))
for n in range(N):
    for o in range(O):
        for a in range(H):
            for b in range(W):
                y_loops[n, o, a, b] = np.sum(ws[o] * xp[n, :, a : a + 3, b : b + 3])
print(
    f"im2col vs loops: {np.abs(y_im2col - y_loops).max():.1e}, F.conv2d vs loops: {np.abs(y_layer - y_loops).max():.1e}"
)

# %% [markdown]
# The backward pass is the same idea run in reverse: $\partial w = \partial y \cdot \text{cols}^\top$ and
# $\partial \text{cols} = w^\top \partial y$, folded back onto the image by **col2im**, which adds each
# window's gradient to the pixels it came from (a pixel in several windows collects from all of them).
# The price of im2col is memory: the matrix is $k_h k_w$ times bigger than the image.
#
# ## 2. Pooling
#
# Max pooling keeps the largest value of each window; average pooling its mean. The gradient of a max
# goes entirely to the winning pixel, the gradient of an average is shared equally:

# %%
a = minidl.tensor(
    np.array([[[[1.0, 3.0, 2.0, 0.0], [4.0, 0.0, 1.0, 5.0], [0.0, 1.0, 2.0, 2.0], [2.0, 6.0, 1.0, 0.0]]]]),
    requires_grad=True,
)
mx = F.max_pool2d(a, 2)
mx.sum().backward()
print("max pool 2x2:\n", mx.data[0, 0], "\ngradient of its sum w.r.t. the input:\n", a.grad[0, 0])
a.grad = None
av = F.avg_pool2d(a, 2)
av.sum().backward()
print("average pool 2x2:\n", av.data[0, 0], "\ngradient:\n", a.grad[0, 0])

# %% [markdown]
# A ResNet ends with **global average pooling**: each channel's map shrinks to its mean, so the classifier
# sees "how much of feature c is anywhere in the image" - just what a "is there a circle?" label needs.
#
# ## 3. Batch normalization
#
# In training, BatchNorm2d normalizes each channel over the batch and the pixels, then rescales:
#
# $$\hat x = \frac{x - \mu_B}{\sqrt{\sigma_B^2 + \epsilon}}, \qquad y = \gamma \hat x + \beta,$$
#
# and keeps running averages of $\mu_B$ and $\sigma_B^2$ (unbiased, momentum 0.1, as PyTorch) for evaluation,
# when one example must not depend on the others in its batch.

# %%
bn = nn.BatchNorm2d(3)
batch = minidl.tensor(
    rng.normal(loc=[[[[5.0]], [[-2.0]], [[0.0]]]], scale=[[[[3.0]], [[0.5]], [[1.0]]]], size=(8, 3, 4, 4))
)
y = bn(batch)
stats = (0, 2, 3)  # over the batch and the pixels: one mean and variance per channel
print("per-channel mean before:", batch.data.mean(axis=stats).round(2), " after:", y.data.mean(axis=stats).round(6))
print("per-channel std  before:", batch.data.std(axis=stats).round(2), "  after:", y.data.std(axis=stats).round(4))
print("running mean after one batch (0.9 * 0 + 0.1 * batch mean):", bn.running_mean.round(3))
bn.eval()
print("in eval mode the running statistics are used: output mean", bn(batch).data.mean(axis=(0, 2, 3)).round(2))

# %% [markdown]
# Batch norm is why data-parallel CNN training has a subtlety (Hemsoth 2018; Goyal et al. 2017): with P ranks
# each normalizes over its own b examples, not the global batch of P*b. `--sync-bn` in the training program
# uses `minidl.distributed.SyncBatchNorm`, which sums the per-channel statistics over all ranks.
#
# ## 4. A ResNet on multi-label images
#
# The generated images (`minidl.data.images`) contain any subset of five shapes - circle, square, triangle,
# cross, line - each present with probability 0.4, at random places and sizes, overlapping, on a noisy
# background. The label of an image is a 5-vector of 0/1. So the network has 5 outputs, each an independent
# yes/no: the loss is the binary cross-entropy of each output's sigmoid (`F.binary_cross_entropy_with_logits`,
# computed stably from the logits), and the score is the **per-label accuracy**: the fraction of the 5N
# decisions "logit > 0" that are right. Always answering "absent" would already score about 60%.

# %%
data = generated_images("quick")
print(data)
fig, axes = plt.subplots(2, 6, figsize=(12, 4.4))
for ax, img, lab in zip(axes.flat, data.x_train, data.y_train):
    ax.imshow(img[0], cmap="gray")
    ax.set_title(", ".join(c for c, v in zip(data.classes, lab) if v) or "(none)", fontsize=8)
    ax.axis("off")
tutorial.show(fig, "02_shapes.png")

# %% [markdown]
# `python -m minidl.train cnn` trains `nn.resnet(depth, num_classes=5, in_channels=1, width)`: a 3x3 stem,
# three stages of residual BasicBlocks (widths w, 2w, 4w, the last two starting with stride 2), global
# average pooling and a linear layer (He et al. 2016). SGD with momentum 0.9 and weight decay, a short linear
# warmup, then a cosine decay of the learning rate. The `demo` preset (ResNet-8 of width 8, 10,000 images,
# three epochs) passes 95% per-label accuracy in a few minutes on one core; `quick` (1,000 images) is a
# seconds-long run that only starts to learn.

# %%
minidl.set_default_dtype(np.float32)
result = cnn.main(["--preset", "quick" if QUICK else "demo"])
print(
    f"per-label accuracy {100 * result['accuracy']:.2f}%, every label right on {100 * result['exact']:.1f}% "
    f"of the images, {result['images_per_s']:.0f} images/s"
)

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
train = np.array(result["history"]["train"])
ax1.plot(train[:, 0], 100 * train[:, 2], label="training batches")
test = np.array(result["history"]["test"])
ax1.plot(test[:, 0] * result["steps"] / max(test[-1, 0], 1), 100 * test[:, 1], "o-", label="test set")
ax1.axhline(100 * max(data.y_test.mean(), 1 - data.y_test.mean()), color="gray", ls=":", label="always 'absent'")
ax1.set_xlabel("step")
ax1.set_ylabel("per-label accuracy (%)")
ax1.legend()
ax2.bar(data.classes, 100 * result["per_label"])
ax2.set_ylim(50, 100)
ax2.set_ylabel("test accuracy (%)")
ax2.set_title("per label")
tutorial.show(fig, "02_resnet_training.png")

# %% [markdown]
# ## Other data and more ranks
#
# ```
# python -m minidl.train cnn --preset resnet20                     # ResNet-20, width 16 (He et al.'s CIFAR net)
# python -m minidl.train cnn --data ~/data/mnist                   # MNIST / Fashion-MNIST IDX files: 10 classes,
#                                                                  #   cross-entropy, accuracy
# mpiexec -n 4 python -m minidl.train cnn --parallel data --sync-bn --allreduce ring
# ```
#
# ## What to remember
# - im2col turns convolution into one matrix product (and col2im its gradient back into an image); the cost
#   is a k_h k_w-times larger temporary.
# - Max pooling routes the gradient to the maximum; global average pooling summarizes each feature map.
# - Batch norm uses batch statistics in training and running statistics in evaluation.
# - Multi-label = K independent sigmoids with binary cross-entropy, scored per label.
