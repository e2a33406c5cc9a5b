"""Settings for the tests run under ``mpiexec -n P python -m pytest tests/mpi``.

Every rank runs the same tests in the same order with derandomized hypothesis, so the
collective calls match up. A failure on one rank would leave the others waiting inside a
collective, so a failing test aborts the whole job (MPI_Abort) after printing its report:
the run fails loudly on every rank instead of hanging.

Rank 0 alone prints pytest's progress and summary (P interleaved copies would say nothing more), with
the reason of every skip (a test written for another number of ranks says which); another rank prints
only the report of a test that failed there, marked with its rank, before the abort.
"""

import sys
import tempfile
import time

import pytest
from hypothesis import settings
from mpi4py import MPI

settings.load_profile("mpi")


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """One temporary directory per rank: the ranks' pytest processes would otherwise race to create and
    clean up the same numbered directories under /tmp/pytest-of-<user>. Rank 0 reports (skips with their
    reasons); the other ranks' terminal reporters are removed (a failure still prints, see below)."""
    rank = MPI.COMM_WORLD.Get_rank()
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix=f"minidl-pytest-rank{rank}-")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if rank == 0 and reporter is not None and not {"s", "a", "A"} & set(reporter.reportchars):
        reporter.reportchars += "s"  # the short summary names each skip's reason
    elif rank != 0 and reporter is not None:
        config.pluginmanager.unregister(reporter)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        comm = MPI.COMM_WORLD
        sys.stderr.write(
            f"\n[rank {comm.Get_rank()} of {comm.Get_size()}] FAILED {item.nodeid}\n{report.longreprtext}\n"
        )
        sys.stderr.flush()
        time.sleep(0.5)  # let mpiexec forward the report before MPI_Abort kills every process
        comm.Abort(1)


@pytest.fixture
def comm():
    return MPI.COMM_WORLD
