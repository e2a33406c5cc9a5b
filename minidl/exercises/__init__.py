"""Exercises, each with its checker: write the piece yourself, and one command tells you whether it holds.

    python -m minidl.exercises list                      the exercises, in order, and where their files are
    python -m minidl.exercises start ring_allreduce      copy the skeleton to exercises/03_ring_allreduce.py
    python -m minidl.exercises check ring_allreduce      check your copy: exit 0 pass, 1 fail, 2 usage error
    python -m minidl.exercises check ring_allreduce --submit    also fresh random inputs and hidden cases
    python -m minidl.exercises check ring_allreduce --solution  check the reference solution
    python -m minidl.exercises grade class/ ring_allreduce      --submit on every copy in class/, one table

Where the files are:
    minidl/exercises/skeletons/NN_name.py    the untouched skeletons (signatures, the math in docstrings,
                                             bodies that raise NotImplementedError("exercise: ..."))
    exercises/NN_name.py                     your copy, made by ``start`` in the directory you run from;
                                             ``check`` reads it (else the untouched skeleton; or --file PATH)
    minidl/exercises/solutions/NN_name.py    the reference solutions
    minidl/exercises/check_*.py              the checkers; hashes.py, the hidden cases' SHA-256 hashes

The exercises come in the order the tutorials teach them, and each needs only the ones before it:

     1 logsumexp            an op's forward and backward as an autograd Function      gradcheck, float64
     2 lstm_cell_backward   one LSTM step's backward, by hand                          minidl's autograd twin
     3 ring_allreduce       reduce-scatter + allgather round a ring                    the kit + the ring's cost
     4 tree_broadcast       the binomial-tree broadcast                               the kit + log2 p rounds
     5 recursive_doubling   recursive-doubling allreduce for any p (the fold)         the kit + its rounds
     6 one_f_one_b          the 1F1B pipeline schedule                                 its rules + its bubble
     7 average_gradients    data-parallel gradient averaging, unequal shards          one process, bitwise
     8 zero1                ZeRO-1: SGD with momentum, its state sharded              one process + shard sizes

A failure names the property that broke and the smallest case that breaks it (for exercises 3 to 5 the
kit's shrunk report, with the messages of the failing run); an unwritten function is reported as "not
implemented yet: <function>". ``--submit`` runs inputs drawn from a fresh random seed and hidden cases
whose expected outputs are stored only as SHA-256 hashes (hashes.py), so a solution tuned to the visible
cases is found out. No checker imports a solution: the oracles are minidl's own tools. ``check`` runs the
student's code in a process of its own under a time limit (``--time-limit``, default 180 s), so an endless
loop, a sleep, ``sys.exit`` or ``os._exit`` is a FAIL with its reason.
"""

from __future__ import annotations

from minidl.exercises.core import Exercise, Outcome, run

EXERCISES: tuple[Exercise, ...] = (
    Exercise(1, "logsumexp", "an op's forward and backward as an autograd Function (gradcheck, float64)",
             ("LogSumExp.forward", "LogSumExp.backward"), "tutorials/01_autograd.py",
             "check_autograd:check_logsumexp:digest_logsumexp"),
    Exercise(2, "lstm_cell_backward", "one LSTM step's backward by hand, against minidl's autograd",
             ("lstm_cell_backward",), "tutorials/03_lstm_language_model.py", "check_autograd:check_lstm:digest_lstm"),
    Exercise(3, "ring_allreduce", "ring allreduce: reduce-scatter, then allgather (the kit, the ring's cost)",
             ("allreduce",), "tutorials/04_collectives.py", "check_collectives:check_ring:digest_allreduce"),
    Exercise(4, "tree_broadcast", "binomial-tree broadcast in ceil(log2 p) rounds (the kit)",
             ("broadcast",), "tutorials/04_collectives.py", "check_collectives:check_tree:digest_tree"),
    Exercise(5, "recursive_doubling", "recursive-doubling allreduce for any p, with the fold (the kit)",
             ("allreduce",), "tutorials/04_collectives.py", "check_collectives:check_doubling:digest_allreduce"),
    Exercise(6, "one_f_one_b", "the 1F1B pipeline schedule (its rules, its bubble)",
             ("one_f_one_b",), "tutorials/06_model_and_pipeline_parallel.py",
             "check_parallel:check_schedule:digest_schedule"),
    Exercise(7, "average_gradients", "data-parallel gradient averaging, exact against one process",
             ("average_gradients",), "tutorials/05_data_parallel.py", "check_parallel:check_average:digest_average"),
    Exercise(8, "zero1", "ZeRO-1: SGD with momentum, its state sharded over the ranks",
             ("shard_bounds", "ZeroSGD"), "tutorials/05_data_parallel.py", "check_parallel:check_zero:digest_zero"),
)  # fmt: skip

__all__ = ["EXERCISES", "Exercise", "Outcome", "find", "run"]


def find(name: str) -> Exercise | None:
    """The exercise called ``name``, or numbered ``name`` ("3", "03")."""
    for ex in EXERCISES:
        if name in (ex.name, str(ex.number), f"{ex.number:02d}"):
            return ex
    return None
