"""Training programs: ``python -m minidl.train lm`` and ``python -m minidl.train cnn``, one loop for every mode.

    __main__.py    the entry point: which task
    cli.py         its flags, the preset plus overrides (--print-config), the run; checks.py: every flag checked
    loop.py        fit(task, strategy, ...): the one training loop (its lines: minidl/tools/progress.py)
    strategies.py  the --parallel modes by name; each strategy sits beside its scheme in minidl/distributed
    lm.py, cnn.py  the tasks: presets, data, batches (with the LSTM state carried), loss, evaluation, scores

Imports run one way: entry point -> loop -> strategies -> minidl.distributed. Each task is also callable
from Python, returning its numbers (``minidl.train.lm.main(["--quick"])`` gives a dict with the test
perplexity, the corpus optimum, words/s and the final parameters).
"""
