"""The job log's firewall (issue 31): untrusted output is fenced, rocmenv's own commands are
never inside a fence, whatever the output holds and however threads interleave. Real child
processes write through real pipes; the log is read as GitHub's runner reads it
(:mod:`tests.support.gha_runner`)."""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rocmenv.context import Context
from rocmenv.joblog import JobLog, command_line, joblog
from tests.support.gha_runner import ATTACK, Runner, read_job_log, read_lines


@contextmanager
def runner_pipe() -> Iterator[tuple[io.TextIOWrapper, list[bytes]]]:
    """A stream like the runner's end of a step's stderr: a pipe, read on a thread."""
    read_fd, write_fd = os.pipe()
    got: list[bytes] = []

    def drain() -> None:
        while data := os.read(read_fd, 65536):
            got.append(data)
        os.close(read_fd)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stream = open(write_fd, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        yield stream, got
    finally:
        stream.close()
        reader.join(10)


def attacked(log: JobLog, stdout: io.TextIOWrapper | io.StringIO) -> None:
    with log.child_output(stdout, fence=True) as out:
        subprocess.run(["sh", "-c", ATTACK], stdout=out.stdout_fd, stderr=out.stderr_fd,
                       stdin=subprocess.DEVNULL, timeout=30, check=True)  # fmt: skip


def assert_only_rocmenv_commands(runner: Runner, worst_stdout: list[object]) -> None:
    assert worst_stdout == []
    assert not [c for c in runner.commands if "PWNED" in repr(c) or "passed" in c.data]
    assert not runner.failed
    assert runner.stop_token is None  # processing is on at the end
    tokens = [c.data for c in runner.commands if c.name == "stop-commands"]
    assert tokens and tokens == runner.resumed
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in tokens)


def test_a_child_cannot_stop_rocmenv_commands_nor_issue_its_own() -> None:
    with runner_pipe() as (stream, got):
        log = joblog(stream)
        log.command("group", "rocmenv: before")
        attacked(log, io.StringIO())
        log.command("error", "rocmenv's own, after", title="rocmenv run")
        log.command("endgroup")
    runner, worst = read_job_log(b"", b"".join(got))
    assert_only_rocmenv_commands(runner, worst)
    assert [(c.name, c.data) for c in runner.commands if c.name != "stop-commands"] == [
        ("group", "rocmenv: before"),
        ("error", "rocmenv's own, after"),
        ("endgroup", ""),
    ]
    text = "\n".join(runner.lines)
    assert "PWNED indented" in text and "::stop-commands::pwnedlast" in text  # shown, inert


def test_the_fence_is_resumed_when_the_output_ends_even_mid_line() -> None:
    """Nothing of rocmenv's follows: the fence still ends with the child's output, so a
    later step's (or a later rocmenv's) command is read."""
    with runner_pipe() as (stream, got):
        attacked(joblog(stream), io.StringIO())
        stream.write("::error::a later command\n")
    runner, worst = read_job_log(b"", b"".join(got))
    assert_only_rocmenv_commands(runner, worst)
    assert [c.data for c in runner.annotations()] == ["a later command"]


def test_a_stdout_redirected_to_a_regular_file_gets_the_output_unchanged(tmp_path: Path) -> None:
    with runner_pipe() as (stream, got), open(tmp_path / "out", "w") as stdout:
        attacked(joblog(stream), stdout)
    runner, worst = read_job_log(b"", b"".join(got))
    assert_only_rocmenv_commands(runner, worst)
    data = (tmp_path / "out").read_bytes()
    assert data.startswith(b"::set-output name=image::PWNED-image\n")  # the runner reads none
    assert data.endswith(b"::stop-commands::pwnedlast")
    assert "PWNED-image" in "\n".join(runner.lines)  # stderr's copy, fenced


def test_commands_and_output_from_many_threads_never_mix() -> None:
    """Each command lands outside a fence and each chunk of output inside one, however the
    writers interleave: the lock makes it so, not timing."""
    chunks = [b"::error::PWNED %d\n" % i for i in range(50)] + [b"partial ::add-mask::PWNED"]
    with runner_pipe() as (stream, got):
        log = joblog(stream)

        def output() -> None:
            for chunk in chunks * 20:
                log.untrusted(chunk)

        def commands(n: int) -> None:
            for i in range(200):
                log.command("warning", f"own {n}-{i}")

        threads = [threading.Thread(target=output) for _ in range(3)]
        threads += [threading.Thread(target=commands, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        log.end_untrusted()
    runner, worst = read_job_log(b"", b"".join(got))
    assert_only_rocmenv_commands(runner, worst)
    assert len(runner.annotations()) == 600


def test_outside_github_actions_or_for_trusted_output_nothing_is_fenced() -> None:
    stderr, stdout = io.StringIO(), io.StringIO()
    for env, untrusted in (({}, True), ({"GITHUB_ACTIONS": "true"}, False)):
        ctx = Context(env=env, stdout=stdout, stderr=stderr)
        with ctx.child_output(untrusted=untrusted) as out:
            assert (out.stdout_fd, out.stderr_fd) == (1, 2)  # the streams' own (defaults here)
    assert not joblog(stderr).fenced


def test_a_log_file_is_not_the_job_log_so_nothing_is_fenced_there() -> None:
    """A suite's per-test log (a regular file) gets a container's output as it is."""
    with tempfile.TemporaryFile("w+") as log_file:
        ctx = Context(env={"GITHUB_ACTIONS": "true"}, stdout=log_file, stderr=log_file)
        with ctx.child_output(untrusted=True) as out:
            assert out.stdout_fd == out.stderr_fd == log_file.fileno()


def test_command_messages_and_properties_are_shown_and_escaped() -> None:
    line = command_line("error", "50% of ::x\nhint: y\x1b[2J", {"title": "a,b:c\n"})
    assert line == "::error title=a%2Cb%3Ac\\u000a::50%25 of ::x%0Ahint: y\n"
    (parsed,) = read_lines(line.encode())
    runner = Runner()
    runner.process(parsed)
    (c,) = runner.commands
    assert c.properties == {"title": "a,b:c\\u000a"} and c.data == "50% of ::x\nhint: y"


def test_a_mask_is_the_value_itself() -> None:
    stream = io.StringIO()
    joblog(stream).mask("::sec%ret\x1b")
    runner = Runner()
    runner.process(stream.getvalue().rstrip("\n"))
    assert runner.masks() == ["::sec%ret\x1b"]


def test_only_the_job_log_writes_workflow_commands() -> None:
    """A second line behind the construction: no module but :mod:`rocmenv.joblog` holds a
    string that begins a workflow command (a new one would write around the fence)."""
    import ast

    from tests.support.gha_runner import REGISTERED

    package = Path(__file__).resolve().parents[2] / "rocmenv"
    starts = tuple(f"::{name}" for name in REGISTERED)
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "joblog.py" or "_vendor" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in docstrings:
                    continue
                text = node.value.lstrip()
                if text.startswith(starts) or text.startswith("::{"):
                    found.append(f"{path.relative_to(package)}:{node.lineno}: {node.value[:40]!r}")
    assert found == []
