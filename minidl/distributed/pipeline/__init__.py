"""Pipeline parallelism: stages on ranks, each mini-batch cut into micro-batches that keep them busy.

``engine.py`` (``Pipeline``: one training step run by a schedule; ``make_grid``: data x pipeline
ranks), ``schedule.py`` (GPipe and 1F1B, the bubble's formula and measurement, the plot).
"""

from minidl.distributed.pipeline.engine import Grid, Pipeline, make_grid, split_sequential
from minidl.distributed.pipeline.schedule import bubble_formula, bubble_fraction, ideal_events, plot_schedule

__all__ = [
    "Grid",
    "Pipeline",
    "bubble_formula",
    "bubble_fraction",
    "ideal_events",
    "make_grid",
    "plot_schedule",
    "split_sequential",
]
