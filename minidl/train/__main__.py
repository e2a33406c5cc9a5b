"""``python -m minidl.train {lm,cnn} [flags]``: the language-model or the CNN task, through the one loop."""

from __future__ import annotations

import sys

from minidl.threads import limit_blas_threads

PROGRAMS = {"lm": "an LSTM language model (Zaremba et al. 2014)", "cnn": "a ResNet on images"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    limit_blas_threads()  # one BLAS thread per rank when ranks share a node and the user did not choose
    if not argv or argv[0] not in PROGRAMS:
        lines = "\n".join(f"  {name:4s} {what}" for name, what in PROGRAMS.items())
        print(f"usage: python -m minidl.train {{lm,cnn}} [--help] [flags]\n\nprograms:\n{lines}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    from minidl.train import cnn, lm

    {"lm": lm, "cnn": cnn}[argv[0]].main(argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
