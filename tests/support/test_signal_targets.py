"""A test sends a signal only to what it started (conventions rule 16): a test that signals its
own process (``os.kill(os.getpid(), …)``, ``signal.pthread_kill``, ``signal.raise_signal``) or
its own process group (``os.killpg(0, …)``, ``os.kill(0, …)``) runs forked
(tests/support/forked.py), where that process is a child in a group of its own — never the
test runner. Checked over every test file's syntax tree, and the fork itself proved."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _is(node: ast.expr, dotted: str) -> bool:
    return ast.unparse(node) == dotted


def _signals_itself(call: ast.Call) -> bool:
    func, args = call.func, call.args
    if _is(func, "signal.pthread_kill") or _is(func, "signal.raise_signal"):
        return True
    if (_is(func, "os.kill") or _is(func, "os.killpg")) and args:
        target = ast.unparse(args[0])
        return target in ("os.getpid()", "0", "-1", "os.getpgrp()", "os.getpgid(0)")
    if _is(func, "threading.Timer") and len(args) >= 3:  # Timer(t, os.kill, (os.getpid(), …))
        return _is(args[1], "os.kill") and "os.getpid()" in ast.unparse(args[2])
    return False


def _forked(decorators: list[ast.expr]) -> bool:
    return any("forked" in ast.unparse(d) for d in decorators)


def unforked_self_signals(path: Path, root: Path = TESTS) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    module_forked = any(
        isinstance(n, ast.Assign)
        and any(_is(t, "pytestmark") for t in n.targets)
        and "forked" in ast.unparse(n.value)
        for n in tree.body
    )
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
            continue
        if module_forked or _forked(node.decorator_list):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call) and _signals_itself(inner):
                found.append(f"{path.relative_to(root)}:{inner.lineno} {node.name}")
    return found


def test_every_test_that_signals_its_own_process_runs_forked() -> None:
    found = [
        hit for path in sorted(TESTS.rglob("test_*.py")) for hit in unforked_self_signals(path)
    ]
    assert found == []


def test_the_check_finds_a_self_signal_outside_a_forked_test(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        textwrap.dedent("""
        import os, signal, threading
        import pytest

        def test_a():
            signal.signal(signal.SIGHUP, signal.SIG_DFL)  # uncaught even under nohup
            os.kill(os.getpid(), signal.SIGHUP)

        def test_b():
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()

        def test_c():
            os.killpg(0, signal.SIGINT)

        @pytest.mark.forked
        def test_d():
            signal.pthread_kill(0, signal.SIGINT)

        def test_e(proc):
            os.kill(proc.pid, signal.SIGINT)
        """)
    )
    found = [hit.split()[-1] for hit in unforked_self_signals(sample, tmp_path)]
    assert found == ["test_a", "test_b", "test_c"]


def test_an_uncaught_signal_in_a_forked_test_fails_that_test_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.support.forked"]\n')
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent("""
        import os, signal, pytest

        @pytest.mark.forked
        def test_hangs_up_on_itself():
            signal.signal(signal.SIGHUP, signal.SIG_DFL)  # uncaught even under nohup
            os.kill(os.getpid(), signal.SIGHUP)

        @pytest.mark.forked
        def test_after_it():
            assert os.getpgrp() == os.getpid()  # a process group of its own
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, check=False, start_new_session=True,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout  # tests failed; not -SIGHUP (129), not killed
    assert "FAILED" in done.stdout and "test_hangs_up_on_itself" in done.stdout
    assert "1 failed, 1 passed" in done.stdout
    assert done.returncode != 128 + signal.SIGHUP


@pytest.mark.forked
def test_a_forked_test_is_a_child_in_a_group_of_its_own() -> None:
    assert os.getpgrp() == os.getpid() != os.getppid()
