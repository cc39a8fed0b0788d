"""``@pytest.mark.forked``: the test runs in a forked child of the pytest process, in a process
group of its own, so a signal the test sends to "this process" (``os.kill(os.getpid(), …)``,
``signal.pthread_kill``) or to its own group reaches only that child. When the code under test
fails to catch it, the child dies — a failed test naming the signal — never the test runner
(the way a SIGHUP test once ended a whole run with exit 129 and no test named).

The reports travel back through pytest's own serialisation hooks (what pytest-xdist uses):
pytest-forked 1.7 cannot marshal pytest 9's node ids. The child keeps the test's deadline
(pytest-timeout, ``func_only``: tests/conftest.py sets it for forked tests); the parent waits
at most that long plus :data:`GRACE` and then kills the child it started.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

GRACE = 30.0  # seconds past the test's own deadline before the parent ends the child
_CRASHED = 3  # the child's exit status when it could not even report


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "forked: run in a forked child in its own process group (tests that signal their own "
        "process; tests/support/forked.py)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if item.get_closest_marker("forked") is None:
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in _run_in_child(item):
        ihook.pytest_runtest_logreport(report=report)
    item.session._setupstate.teardown_exact(nextitem)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _deadline(item: pytest.Item) -> float | None:
    mark = item.get_closest_marker("timeout")
    seconds = (mark.args[0] if mark.args else mark.kwargs.get("timeout")) if mark else None
    return float(seconds) + GRACE if seconds else None


def _run_in_child(item: pytest.Item) -> list[pytest.TestReport]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run the test, send the reports, never return into pytest
        status = _CRASHED
        try:
            os.close(read_end)
            os.setpgid(0, 0)
            reports = runtestprotocol(item, log=False)
            hook = item.config.hook
            data = json.dumps(
                [hook.pytest_report_to_serializable(config=item.config, report=r) for r in reports]
            ).encode()
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    chunks: list[bytes] = []
    limit = _deadline(item)
    ends = None if limit is None else time.monotonic() + limit
    timed_out = False
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while True:
            wait = None if ends is None else max(0.0, ends - time.monotonic())
            ready, _, _ = select.select([pipe], [], [], wait)
            if not ready:
                timed_out = True
                os.kill(pid, signal.SIGKILL)  # the child this test started, nothing else
                break
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and not timed_out:
        hook = item.config.hook
        return [
            hook.pytest_report_from_serializable(config=item.config, data=d)
            for d in json.loads(b"".join(chunks))
        ]
    if timed_out:
        why = f"the test's process did not end within {limit:g} s; killed"
    elif os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        why = f"the test's process died of signal {os.WTERMSIG(status)} ({name})"
    else:
        why = f"the test's process exited with status {os.WEXITSTATUS(status)} before reporting"
    return [_crash_report(item, why)]


def _crash_report(item: pytest.Item, why: str) -> pytest.TestReport:
    path, line, _ = item.location
    keywords: dict[str, Any] = {k: 1 for k in item.keywords}
    return pytest.TestReport(
        nodeid=item.nodeid, location=item.location, keywords=keywords, outcome="failed",
        longrepr=f"{path}:{(line or 0) + 1}: {why}", when="call", sections=[], duration=0.0,
    )  # fmt: skip
