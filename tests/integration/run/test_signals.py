"""Signals: forwarded to the container, which is then stopped and removed — never leaked."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    every_engine,
    inspect,
    project_fixture,
    python_startup_interrupted,
    wait_for,
)

# A ceiling that only catches a hang (the command would run forever / for 300 s); the real
# figure from the signal to "rocmenv exited and the container is gone" is measured in
# benchmarks/bench_timings.py.
HANG = 120.0
# in the working directory (the checkout, mounted): the trap is installed
READY = "trap-ready"
TRAPPING = f'trap "echo got-$1; exit 7" INT TERM; touch {READY}; while :; do sleep 0.1; done'


def _start(
    project: Project, engine: str, *command: str, new_session: bool = False
) -> subprocess.Popen[str]:
    return project.popen(
        "run", "--engine", engine, "--profile", "plain", "--image", project.image, "--", *command,
        start_new_session=new_session, env={"PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip


def _communicate_or_dump(proc: subprocess.Popen[str], timeout: float) -> str:
    """rocmenv's stderr once it exits; if it is still running after ``timeout`` (a lost
    interrupt), SIGABRT makes Python's fault handler print every thread's stack, and the
    test fails with it — where the run was stuck is the bug report."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            err = proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1]
        pytest.fail(f"rocmenv still ran {timeout:.0f} s after the signal; its threads:\n{err}")


def _running(project: Project) -> bool:
    for c in project.containers():
        try:
            if inspect(c)["State"]["Running"]:
                return True
        except Exception:  # gone meanwhile
            continue
    return False


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@every_engine
def test_a_signal_is_forwarded_then_the_container_is_removed(
    project: Project, engine: str, sig: signal.Signals, code: int
) -> None:
    proc = _start(project, engine, "sh", "-c", TRAPPING, "sh", "sig")
    try:
        assert wait_for((project.cwd / READY).exists, HANG), "the trap was never installed"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=HANG)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert "got-sig" in out  # the container saw the signal
    assert project.containers() == []


@every_engine
def test_a_container_that_ignores_sigint_is_killed(project: Project, engine: str) -> None:
    # sleep as PID 1 has no handler, so the kernel ignores SIGINT for it
    proc = _start(project, engine, "sleep", "300")
    try:
        assert wait_for(lambda: _running(project), HANG), "the container never ran"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=HANG)  # long before `sleep 300` would end by itself
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert project.containers() == []


@pytest.mark.slow
@every_engine
def test_twenty_interrupted_runs_leave_no_container(project: Project, engine: str) -> None:
    """Interrupt at every stage (start-up, create, start, running), half of them the way a
    terminal does (SIGINT to the whole process group, CLI children included). The runs go in
    ten pairs, each pair started together and interrupted at the same moment (one each way:
    two runs interrupted at once must not leave one another's container either)."""
    codes: list[int] = []
    unexpected: list[str] = []
    for pair in range(10):
        procs: list[tuple[int, subprocess.Popen[str]]] = []
        try:
            for i in (2 * pair, 2 * pair + 1):
                command = ("sleep", "300") if i % 4 == 0 else ("sh", "-c", TRAPPING, "sh", "int")
                procs.append((i, _start(project, engine, *command, new_session=i % 2 == 1)))
            time.sleep(0.15 * pair)  # 0 … 1.35 s after the processes started
            for i, proc in procs:
                if i % 2 == 1:
                    os.killpg(proc.pid, signal.SIGINT)
                else:
                    proc.send_signal(signal.SIGINT)
            errs = [(i, proc, _communicate_or_dump(proc, HANG)) for i, proc in procs]
        finally:
            for _, proc in procs:
                proc.kill()
                proc.wait()
        for i, proc, err in errs:
            startup = proc.returncode == 1 and python_startup_interrupted(err)
            codes.append(-signal.SIGINT if startup else proc.returncode)
            if codes[-1] not in (130, -signal.SIGINT):
                unexpected.append(f"run {i}: exit {proc.returncode}: {err[-1500:]}")
    leftovers = project.containers()
    assert leftovers == [], f"{len(leftovers)} containers left after 20 interrupted runs"
    # interrupted before Python set up its handlers, a process dies of the signal itself
    assert not unexpected, "\n".join(unexpected)
