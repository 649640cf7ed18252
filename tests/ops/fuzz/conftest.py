"""Hypothesis profiles for the fuzz suite (tests/ops/fuzz).

    default  ``fuzz``  a few dozen examples per target, no deadline: fits CI (~1-2 min for the suite)
    long     ``--hypothesis-profile=long``  thousands per target, for a nightly or a local soak run

    .venv/bin/python -m pytest tests/ops/fuzz -q -p no:cacheprovider
    .venv/bin/python -m pytest tests/ops/fuzz -q -p no:cacheprovider --hypothesis-profile=long
    TPUCTL_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest tests/ops/fuzz ...   # any size in between
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, derandomize=False, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                      HealthCheck.data_too_large, HealthCheck.filter_too_much])

settings.register_profile("fuzz", max_examples=int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "60")), **_COMMON)
settings.register_profile("long", max_examples=int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "2000")), **_COMMON)


def pytest_configure(config):
    requested = config.getoption("hypothesis_profile", default=None)
    settings.load_profile(requested if requested in ("fuzz", "long") else "fuzz")
