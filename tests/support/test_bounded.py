"""The bounded runner: a child's own peak RSS (not the test process's), the address-space
limit enforced, the time limit killing the process group."""

from __future__ import annotations

import sys

from tests.support.bounded import run_bounded

LIMIT = 1 << 30


def test_a_small_child_reports_its_own_peak_not_the_test_process() -> None:
    ballast = bytearray(300 << 20)  # the test process is big; the child must not look it
    done = run_bounded([sys.executable, "-c", "print('hi')"], address_space=LIMIT, timeout=60)
    assert (done.code, done.stdout, done.timed_out) == (0, "hi\n", False)
    assert done.peak_rss_mb < 100, done.describe()
    del ballast


def test_the_address_space_limit_turns_a_big_allocation_into_memory_error() -> None:
    code = "import sys\ntry:\n    b = bytearray(2 << 30)\nexcept MemoryError:\n    sys.exit(42)\n"
    done = run_bounded([sys.executable, "-c", code], address_space=LIMIT, timeout=60)
    assert done.code == 42, done.describe()
    allowed = run_bounded(
        [sys.executable, "-c", "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096])"],
        address_space=LIMIT,
        timeout=60,
    )
    assert allowed.code == 0 and 200 < allowed.peak_rss_mb < 400, allowed.describe()


def test_the_time_limit_kills_the_command_and_says_so() -> None:
    done = run_bounded(
        [sys.executable, "-c", "import time; print('x', flush=True); time.sleep(60)"],
        address_space=LIMIT,
        timeout=1,
    )
    assert done.timed_out and done.code != 0 and done.stdout == "x\n"
    assert done.seconds < 30
