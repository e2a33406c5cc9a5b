"""A virtual-time cluster for the data-parallel training step: ``python -m minidl.simulate lm|cnn``.

profile.py   one real rank's step measured here: forward, backward, update, bucket sizes and ready times
tasks.py     the trainer's LM and CNN steps (presets, models, optimizer) to profile
node.py      a node description (cores, per-core speed, efficiency, ranks per node) scaling the compute
network.py   the seconds of one allreduce on a network (``collectives.allreduce_time``)
step.py      the step on P nodes (with or without overlap) and the scaling table
schemes.py   the other schemes' steps (parameter servers, local SGD, pipelines, tensor parallelism) and stragglers
cli.py       the command line

from minidl.simulate import TaskOptions, profile_task, scaling
prof = profile_task("lm", TaskOptions(preset="demo"))
for row in scaling(prof, [1, 2, 4, 8], "ring", "crossbar"):
    print(row.nodes, row.rate, row.efficiency)
"""

from minidl.simulate.network import allreduce_time
from minidl.simulate.node import NodeSpec
from minidl.simulate.profile import BucketProfile, Profile, capture, described, gradient_clock
from minidl.simulate.schemes import Scheme, Variation
from minidl.simulate.step import Cluster, Row, StepTime, scaling, simulate_step, step_time
from minidl.simulate.tasks import TaskOptions, profile_task

__all__ = [
    "BucketProfile",
    "Cluster",
    "NodeSpec",
    "Profile",
    "Row",
    "Scheme",
    "StepTime",
    "TaskOptions",
    "Variation",
    "allreduce_time",
    "capture",
    "described",
    "gradient_clock",
    "profile_task",
    "scaling",
    "simulate_step",
    "step_time",
]
