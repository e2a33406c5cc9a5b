"""Checkpoints on a schedule (``--save-every N --keep K``), found again by the elastic launcher.

``--save PATH`` names the run's checkpoint (written after every epoch and at the end). With
``--save-every N`` the run also writes one every N optimizer steps beside it, named by the step::

    runs/lm.npz                      (--save: epochs' ends and the end)
    runs/lm.step00000040.npz         (--save-every 20 --keep 2: the last two scheduled ones)
    runs/lm.step00000060.npz

Each is written atomically (``minidl.save``: a temporary file, fsync, ``os.replace``), so a rank killed
while writing leaves the previous checkpoint whole. Only the newest ``K`` scheduled ones are kept.
``latest(PATH)`` is the newest scheduled checkpoint (``python -m minidl.launch`` resumes from the newest that
loads). A rank killed while writing leaves its temporary ``.tmp-*.npz``; ``prune`` (``--keep``) removes those
that have not been written to for a minute.
"""

from __future__ import annotations

import glob
import os
import re
import sys
import time

RUN_ID_VARIABLE = "MINIDL_RUN_ID"  # the run id a job's checkpoints carry (python -m minidl.launch sets it)
STALE_SECONDS = 60.0  # a temporary not written to for this long belongs to no live save (a save takes seconds)


def _stem(save: str) -> str:
    return save[:-4] if save.endswith(".npz") else save


def scheduled_path(save: str, step: int) -> str:
    """The scheduled checkpoint of step ``step`` beside ``--save``'s file."""
    return f"{_stem(save)}.step{step:08d}.npz"


def scheduled(save: str) -> list[tuple[int, str]]:
    """The scheduled checkpoints beside ``save``, as (step, path), oldest first."""
    pattern = re.compile(re.escape(os.path.basename(_stem(save))) + r"\.step(\d{8})\.npz$")
    found = []
    for path in glob.glob(glob.escape(_stem(save)) + ".step*.npz"):
        m = pattern.match(os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


def latest(save: str) -> str | None:
    """The newest scheduled checkpoint beside ``save`` (None if there is none)."""
    found = scheduled(save)
    return found[-1][1] if found else None


def run_of(path: str) -> str | None:
    """The run id written into checkpoint ``path`` (``state["run"]``), read alone; None if it has none or cannot be
    read (a checkpoint of an older minidl, a damaged file)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as archive:
            return str(archive["state/run"]) if "state/run" in archive.files else None
    except Exception:  # noqa: BLE001 - a damaged file (zipfile.BadZipFile, OSError, ...) is no run's
        return None


def run_of_args(args: object) -> str | None:
    """The run id of a training run's flags (``minidl.train.outputs.claim`` settles it on the rank that writes)."""
    return getattr(getattr(args, "outputs", None), "run", None)


def lock_path(save: str) -> str:
    """The lock file of the job writing checkpoints at ``save`` (minidl.train.outputs.SaveLock)."""
    return f"{save}.lock"


def prune(save: str, keep: int, run: str | None = None) -> list[str]:
    """Remove all but the newest ``keep`` scheduled checkpoints, and stale temporaries; returns the removed paths.
    With ``run``, only that run's checkpoints count and go (another run's in the same folder are left alone)."""
    found = [(step, path) for step, path in scheduled(save) if run is None or run_of(path) == run]
    gone = [path for _, path in found[: max(len(found) - keep, 0)]]
    for path in gone:
        os.remove(path)
    return gone + prune_temporaries(save)


def prune_temporaries(save: str, older_than: float = STALE_SECONDS) -> list[str]:
    """Remove the half-written temporaries (``minidl.save``'s ``.tmp-*.npz``) in ``save``'s directory that no
    one has written to for ``older_than`` seconds: left by a rank killed while it wrote. Returns their paths."""
    now, gone = time.time(), []
    for path in glob.glob(os.path.join(glob.escape(os.path.dirname(os.path.abspath(save))), ".tmp-*.npz")):
        try:
            if now - os.path.getmtime(path) >= older_than:
                os.remove(path)
                gone.append(path)
        except OSError:  # removed meanwhile, by another rank's prune
            continue
    return sorted(gone)


def failure_marker(save: str) -> str:
    """The file that records that ``--inject-failure`` has fired for this job (a restart must not fail again)."""
    return f"{_stem(save)}.failure-injected"


def die(save: str | None, rank: int, step: int) -> None:
    """Exit at once with status 1, without MPI's or Python's clean-up (no finalize, no ``finally``), as a node
    that is lost would; first leave the marker beside the checkpoints so the restarted job runs through."""
    marker = failure_marker(save) if save else None
    if marker is not None and os.path.exists(marker):
        return
    if marker is not None:
        with open(marker, "w") as f:
            f.write(f"rank {rank} failed at step {step}\n")
    print(f"[rank {rank}] --inject-failure: exiting abruptly at step {step}", file=sys.stderr, flush=True)
    os._exit(1)
