"""The two training programs' steps, as ``python -m minidl.train lm|cnn --parallel data`` runs them, for profiling.

Same models (``LSTMLanguageModel``, ``nn.resnet``, ``nn.resnet_imagenet``), same presets, same loss, same optimizer and update (the LM
clips to the global norm after the allreduce, then SGD; the CNN takes SGD with momentum and weight decay), the
same fusion plan. The inputs are random tokens / images of the task's shapes: a dense step's time does not
depend on the values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.simulate.profile import MAX_SPREAD, Profile, capture


@dataclass(frozen=True)
class TaskOptions:
    """What to build: the trainer's preset and the flags that override it (None: the preset's)."""

    preset: str | None = None
    batch_size: int | None = None
    num_steps: int | None = None  # LM: BPTT window T
    hidden_size: int | None = None
    layers: int | None = None
    vocab: int | None = None  # LM: default the preset's corpus (10,000 for Zaremba's, the generated one's else)
    depth: int | None = None  # CNN
    width: int | None = None
    dtype: str = "float32"
    fusion_mb: float = 64.0
    steps: int = 5
    seed: int = 0
    max_spread: float | None = MAX_SPREAD  # refuse a profile taken on a busy machine (profile.ContentionError)
    sparse_embedding: bool = False  # LM: the embedding's gradient exchanged as its non-zero rows (--sparse-embedding)
    model: str | None = None  # CNN: "resnet" (the CIFAR ResNet of depth and width) or "resnet18" ... "resnet152"
    image: int | None = None  # CNN: the images' side in pixels (default the preset's)


def presets(kind: str) -> dict[str, Any]:
    """The trainer's presets for ``kind`` ("lm" or "cnn")."""
    if kind == "lm":
        from minidl.train.lm import PRESETS
    elif kind == "cnn":
        from minidl.train.cnn import PRESETS
    else:
        raise ValueError(f"unknown task {kind!r}: expected lm or cnn")
    return PRESETS


def _config(kind: str, o: TaskOptions) -> tuple[str, Any]:
    table = presets(kind)
    imagenet = kind == "cnn" and o.model not in (None, "resnet")
    name = o.preset or ("imagenet" if imagenet else "demo")  # as the trainer picks (CNNTask.default_preset)
    if name not in table:
        raise ValueError(f"--preset {name!r}: the {kind} presets are {', '.join(sorted(table))}")
    fields = (
        {"batch_size": o.batch_size, "num_steps": o.num_steps, "hidden_size": o.hidden_size, "num_layers": o.layers}
        if kind == "lm"
        else {"batch_size": o.batch_size, "depth": o.depth, "width": o.width, "model": o.model, "image": o.image}
    )
    changes = {k: v for k, v in fields.items() if v is not None}
    return name, table[name].with_(**changes) if changes else table[name]


def lm_vocab(preset: str, cfg: Any) -> int:
    """Zaremba's presets: PTB's 10,000 words; the others train on the generated corpus (its vocabulary)."""
    from minidl.models.lm import PRESETS as ZAREMBA

    if preset in ZAREMBA:
        return int(cfg.vocab_size)
    from minidl.data.corpus_gen import generated_corpus
    from minidl.train.lm import GENERATED_CORPUS

    return len(generated_corpus(GENERATED_CORPUS.get(preset, "default"), seed=0).vocab)


def profile_lm(o: TaskOptions) -> Profile:
    """Profile one rank of ``python -m minidl.train lm --parallel data`` (B streams x T words per step)."""
    from minidl.models.lm import LSTMLanguageModel

    preset, cfg = _config("lm", o)
    vocab = o.vocab or lm_vocab(preset, cfg)
    B, T = cfg.batch_size, cfg.num_steps
    model = LSTMLanguageModel(
        vocab,
        cfg.hidden_size,
        cfg.num_layers,
        cfg.dropout,
        init_scale=cfg.init_scale,
        sparse_embedding=o.sparse_embedding,
    )
    params = list(model.parameters())
    opt = optim.SGD(params, lr=cfg.lr)
    rng = np.random.default_rng(o.seed)
    state = [model.init_hidden(B)]

    def forward() -> Any:
        ids = rng.integers(0, vocab, size=(T + 1, B))
        logits, new = model(ids[:-1], model.detach_state(state[0]))
        state[0] = new
        return F.cross_entropy(logits, ids[1:].reshape(-1))

    def update() -> None:
        optim.clip_grad_norm(params, cfg.max_grad_norm)
        opt.step()

    n = sum(p.data.size for p in params)
    task = f"LSTM LM preset {preset!r} ({cfg.num_layers} x {cfg.hidden_size}, vocabulary {vocab:,}, {n:,} parameters)"
    task += ", embedding exchanged by rows" if o.sparse_embedding else ""
    prof = capture(
        task, "words", B * T, model, opt, forward, update, int(o.fusion_mb * 2**20), o.steps, max_spread=o.max_spread
    )
    itemsize = np.dtype(minidl.get_default_dtype()).itemsize
    return replace(prof, activation_bytes=B * T * cfg.hidden_size * itemsize, layers=cfg.num_layers, sequential=T)


def profile_cnn(o: TaskOptions) -> Profile:
    """Profile one rank of ``python -m minidl.train cnn --parallel data`` (b images per step)."""
    from minidl.data.images import IMAGE_CONFIGS, SHAPE_CLASSES
    from minidl.models.resnet import IMAGENET_MODELS

    preset, cfg = _config("cnn", o)
    if cfg.model not in ("resnet", *IMAGENET_MODELS):
        raise ValueError(f"--model {cfg.model!r}: choose resnet or one of {', '.join(IMAGENET_MODELS)}")
    shape = IMAGE_CONFIGS[cfg.images]
    C, S, K, b = shape["channels"], cfg.image or shape["size"], len(SHAPE_CLASSES), cfg.batch_size
    imagenet = cfg.model in IMAGENET_MODELS
    if imagenet and S < 32:
        raise ValueError(f"--image {S}: torchvision's ResNets need images of at least 32 pixels")
    model = nn.resnet_imagenet(int(cfg.model[6:]), K, C) if imagenet else nn.resnet(cfg.depth, K, C, cfg.width)
    opt = optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(o.seed)
    dtype = minidl.get_default_dtype()

    def forward() -> Any:
        x = minidl.tensor(rng.random((b, C, S, S)).astype(dtype))
        y = (rng.random((b, K)) < 0.5).astype(dtype)
        return F.binary_cross_entropy_with_logits(model(x), y)

    n = sum(p.data.size for p in model.parameters())
    net = f"ResNet-{cfg.model[6:]} (torchvision)" if imagenet else f"ResNet-{cfg.depth} (width {cfg.width})"
    task = f"{net} preset {preset!r} ({C}x{S}x{S} images, batch {b}, {n:,} parameters)"
    prof = capture(
        task, "images", b, model, opt, forward, opt.step, int(o.fusion_mb * 2**20), o.steps, max_spread=o.max_spread
    )
    # the largest feature maps: the CIFAR stem's width x S x S; the ImageNet stem's 64 x S/2 x S/2
    stem = b * (64 * ((S + 1) // 2) ** 2 if imagenet else cfg.width * S * S) * np.dtype(dtype).itemsize
    return replace(prof, activation_bytes=stem, layers=int(cfg.model[6:]) if imagenet else cfg.depth)


def profile_task(kind: str, options: TaskOptions) -> Profile:
    """Measure the profile of ``kind`` ("lm" or "cnn") here, in ``options.dtype``, seeded."""
    if kind not in ("lm", "cnn"):
        raise ValueError(f"unknown task {kind!r}: expected lm or cnn")
    if kind != "cnn" and (options.model or options.image):
        raise ValueError("--model and --image apply only to the CNN (cnn)")
    if options.sparse_embedding and kind != "lm":
        raise ValueError("--sparse-embedding applies only to the language model (lm): this model has no embedding")
    previous = minidl.get_default_dtype()
    minidl.manual_seed(options.seed)
    minidl.set_default_dtype(np.float64 if options.dtype == "float64" else np.float32)
    try:
        return profile_lm(options) if kind == "lm" else profile_cnn(options)
    finally:
        minidl.set_default_dtype(previous)
