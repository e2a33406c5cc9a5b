"""Shared test settings.

Hypothesis: no deadlines (this is a shared 2-core machine), and under mpiexec every rank must
draw the same examples, so the profile is derandomized with no example database.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    max_examples=int(os.environ.get("MINIDL_HYPOTHESIS_EXAMPLES", "100")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "mpi",
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=int(os.environ.get("MINIDL_HYPOTHESIS_EXAMPLES", "50")),
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)
settings.load_profile(os.environ.get("MINIDL_HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    """Tests may switch the default dtype (float64 for gradchecks); put it back afterwards."""
    import minidl

    before = minidl.get_default_dtype()
    yield
    minidl.set_default_dtype(before)


@pytest.fixture
def float64():
    """Default dtype float64 for the test (exactness and gradient checks); restored afterwards."""
    import minidl

    minidl.set_default_dtype(np.float64)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _torch_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def pytest_sessionfinish(session, exitstatus):
    """With PyTorch installed, a parity test that skips is a failure: CI must compare against PyTorch.

    Without PyTorch the parity tests skip (and ``pytest -rs`` lists them with the reason).
    """
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not _torch_importable():
        return
    skipped = [r for r in reporter.stats.get("skipped", []) if "torch" in str(getattr(r, "longrepr", "")).lower()]
    if skipped:
        names = ", ".join(r.nodeid for r in skipped[:5])
        reporter.write_line(f"FAILED: {len(skipped)} PyTorch parity tests skipped although torch is installed: {names}")
        session.exitstatus = 1
