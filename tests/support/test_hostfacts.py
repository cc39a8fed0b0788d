"""tests/support/hostfacts.py (harness): the facts the option tests read about this host."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from tests.support import hostfacts


def test_a_limit_at_or_below_the_engines_hard_limit_starts() -> None:
    hard = hostfacts.engine_hard_limit("nofile")
    assert hard == hostfacts.UNLIMITED or hard > 0
    if hard != hostfacts.UNLIMITED:
        assert hostfacts.ulimit_starts("nofile", min(1024, hard), hard)


def test_nofile_above_the_kernels_ceiling_never_starts() -> None:
    too_high = hostfacts.nr_open() * 2
    assert not hostfacts.ulimit_starts("nofile", too_high, too_high)
    assert not hostfacts.ulimit_starts("nofile", -1, -1)


def test_unlimited_memlock_starts_only_where_the_host_allows_it() -> None:
    hard = hostfacts.engine_hard_limit("memlock")
    expected = hard == hostfacts.UNLIMITED or hostfacts.root_can_raise_hard_limits()
    assert hostfacts.ulimit_starts("memlock", -1, -1) is expected


def test_root_can_raise_matches_a_direct_attempt() -> None:
    """The probe agrees with trying it here, in a child of our own."""
    code = (
        "import resource\n"
        "s, h = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "n = int(open('/proc/sys/fs/nr_open').read())\n"
        "raise SystemExit(0 if h == resource.RLIM_INFINITY or h >= n else 2)\n"
    )
    at_ceiling = subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    if at_ceiling:  # nothing to raise: the probe has nothing to prove here
        assert hostfacts.root_can_raise_hard_limits() is True
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised = subprocess.run(
        [sys.executable, "-c",
         f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard + 1}))"],
        capture_output=True, check=False,
    ).returncode == 0  # fmt: skip
    assert hostfacts.root_can_raise_hard_limits() is raised


@pytest.mark.parametrize("name", ["memlock", "nofile", "stack", "nproc"])
def test_the_engines_limits_are_read_from_its_process(name: str) -> None:
    value = hostfacts.engine_hard_limit(name)
    assert value == hostfacts.UNLIMITED or value > 0
