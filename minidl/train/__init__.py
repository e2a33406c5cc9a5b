"""Training programs: ``python -m minidl.train lm`` and ``python -m minidl.train cnn``.

Each is also callable from Python, returning its numbers (``minidl.train.lm.main(["--quick"])`` gives a
dict with the test perplexity, the corpus optimum, words/s and the final parameters). ``--help`` on
either lists the presets and flags; ``common.py`` holds what they share (progress lines, ranks,
checkpoints).
"""
