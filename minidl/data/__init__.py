"""Data: generated corpora and image sets that ship as code, readers for real files, batching.

- ``generated_corpus(config="default", seed=0)``: text from a known HMM, with its optimal perplexity.
- ``read_ptb(dir)``, ``read_text_file(path)``: real text; ``batchify`` and ``bptt_batches`` (Zaremba).
- ``generated_images(config="default", seed=0)``: multi-label shape images; ``batches`` minibatches.
- ``load_idx``/``save_idx``/``load_mnist``: the IDX (MNIST) format.
"""

from minidl.data.corpus_gen import CONFIGS, CorpusConfig, build_language, generated_corpus
from minidl.data.hmm import HMM
from minidl.data.idx import IDXError, load_idx, load_mnist, save_idx
from minidl.data.images import IMAGE_CONFIGS, SHAPE_CLASSES, ImageSet, batches, generated_images, make_shapes
from minidl.data.text import (
    EOS,
    UNK,
    Corpus,
    Vocabulary,
    batchify,
    bptt_batches,
    num_bptt_batches,
    read_ptb,
    read_text_file,
    read_words,
)

__all__ = [
    "CONFIGS",
    "CorpusConfig",
    "build_language",
    "generated_corpus",
    "HMM",
    "IDXError",
    "load_idx",
    "load_mnist",
    "save_idx",
    "IMAGE_CONFIGS",
    "SHAPE_CLASSES",
    "ImageSet",
    "batches",
    "generated_images",
    "make_shapes",
    "EOS",
    "UNK",
    "Corpus",
    "Vocabulary",
    "batchify",
    "bptt_batches",
    "num_bptt_batches",
    "read_ptb",
    "read_text_file",
    "read_words",
]
