"""A token in ``bootstrap --remote`` never leaves the process: every byte rocmenv writes
(stdout, stderr, the ``--report`` file, ``$GITHUB_STEP_SUMMARY``, ``$GITHUB_ENV``) is grepped
for it, on a fetch that fails and on one that succeeds, with ``--json`` and ``--debug``.
The values of secret-looking environment variables (``HF_TOKEN``, ``GH_PAT``,
``AWS_SECRET_ACCESS_KEY``) are grepped for the same way, as bare values: an install step that
prints its environment, and every other command that echoes its input.

git runs for real: the failing remote is a closed loopback port; the succeeding one is
rewritten by ``url.<local repo>.insteadOf`` (git's own config, through ``GIT_CONFIG_*``), so
git is handed the URL with the token and fetches from a local repository.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rocmenv.cli import main
from rocmenv.context import Context
from tests.support import testenv

TOKEN = "ghp_S3cretTok3nForRedactionTest"
USER_TOKEN_URL = f"https://x-access-token:{TOKEN}@github.invalid/sgl-project/sglang.git"
BARE_TOKEN_URL = f"https://{TOKEN}@github.invalid/sgl-project/sglang.git"


@pytest.fixture(autouse=True)
def _git_installed() -> None:
    if shutil.which("git") is None:
        testenv.missing_environment("git is not installed")


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
        env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"},
    ).stdout.strip()  # fmt: skip


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """An upstream repository with a branch `feature`, and a clone of it as the checkout."""
    upstream = tmp_path / "upstream"
    (upstream / "python").mkdir(parents=True)
    _git("init", "-q", "-b", "main", str(upstream), cwd=tmp_path)
    (upstream / "python" / "pyproject.toml").write_text("[project]\nname='x'\nversion='0'\n")
    _git("add", ".", cwd=upstream)
    _git("commit", "-q", "-m", "one", cwd=upstream)
    _git("checkout", "-q", "-b", "feature", cwd=upstream)
    (upstream / "python" / "new.py").write_text("")
    _git("add", ".", cwd=upstream)
    _git("commit", "-q", "-m", "two", cwd=upstream)
    _git("clone", "-q", "-b", "main", str(upstream), str(tmp_path / "checkout"), cwd=tmp_path)
    return tmp_path / "checkout"


def _fake_python(tmp_path: Path) -> Path:
    """Stands in for `python -m pip --version` / `install -e` (the install is not the point)."""
    script = tmp_path / "fakepython"
    script.write_text("#!/bin/sh\necho pip 24.0\nexit 0\n")
    script.chmod(0o755)
    return script


def _run(
    tmp_path: Path, argv: list[str], extra_env: dict[str, str]
) -> tuple[int, dict[str, bytes]]:
    """Run bootstrap in-process; return the exit code and every output rocmenv wrote."""
    summary, genv, report = tmp_path / "summary.md", tmp_path / "github_env", tmp_path / "r.json"
    for path in (summary, genv, report):
        path.unlink(missing_ok=True)
    summary.touch()
    genv.touch()
    (tmp_path / "proc").mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_ENV": str(genv),
        "GITHUB_ACTIONS": "true",  # errors also become ::error:: annotations
        **extra_env,
    }
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env=env, cwd=tmp_path, stdout=out, stderr=err)
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err  # argparse writes to sys.stderr
    try:
        code = main(
            ["--debug", "bootstrap", "--no-gpu-wait", "--proc-root", str(tmp_path / "proc"),
             "--launcher-dir", str(tmp_path / "launcher"), "--report", str(report), *argv],
            ctx=ctx,
        )  # fmt: skip
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    finally:
        sys.stdout, sys.stderr = real_out, real_err
    written = {
        "stdout": out.getvalue().encode(),
        "stderr": err.getvalue().encode(),
        "summary": summary.read_bytes(),
        "github_env": genv.read_bytes(),
        "report": report.read_bytes() if report.exists() else b"",
    }
    return code, written


def _leaks(written: dict[str, bytes]) -> dict[str, int]:
    return {
        name: data.count(TOKEN.encode()) for name, data in written.items() if TOKEN.encode() in data
    }


@pytest.mark.parametrize("remote", [USER_TOKEN_URL, BARE_TOKEN_URL])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_failed_fetch_from_a_remote_with_a_token_writes_no_token(
    tmp_path: Path, checkout: Path, remote: str, json_flag: list[str]
) -> None:
    closed = remote.replace("github.invalid", f"127.0.0.1:{_closed_port()}")
    code, written = _run(
        tmp_path,
        ["--remote", closed, "--sglang-pr", "feature", "--sglang-path", str(checkout),
         *json_flag],
        {},
    )  # fmt: skip
    assert code == 1, written["stderr"].decode()
    assert b"overrides   failed" in written["stderr"]
    assert b"https://***@127.0.0.1" in written["stderr"]  # the remote is shown, masked
    assert written["report"], "the report was not written"
    assert _leaks(written) == {}


@pytest.mark.parametrize("remote", [USER_TOKEN_URL, BARE_TOKEN_URL])
def test_successful_fetch_from_a_remote_with_a_token_writes_no_token(
    tmp_path: Path, checkout: Path, remote: str
) -> None:
    upstream = tmp_path / "upstream"
    code, written = _run(
        tmp_path,
        ["--remote", remote, "--sglang-pr", "feature", "--sglang-path", str(checkout),
         "--python", str(_fake_python(tmp_path)), "--json"],
        {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{upstream}.insteadOf",
         "GIT_CONFIG_VALUE_0": remote},
    )  # fmt: skip
    assert code == 0, written["stderr"].decode()
    assert _git("rev-parse", "HEAD", cwd=checkout) == _git("rev-parse", "feature", cwd=upstream)
    assert b'"argv"' in written["stdout"]  # the git commands are in the report...
    assert _leaks(written) == {}  # ...without the token


def test_a_remote_git_must_not_see_is_refused_without_echoing_its_token(
    tmp_path: Path, checkout: Path
) -> None:
    code, written = _run(
        tmp_path,
        ["--remote", f"-c https://u:{TOKEN}@h/x", "--sglang-pr", "feature",
         "--sglang-path", str(checkout)],
        {},
    )  # fmt: skip
    assert code == 2
    assert b"is not a remote name" in written["stderr"]
    assert _leaks(written) == {}


def test_an_argparse_error_does_not_echo_a_token(tmp_path: Path) -> None:
    code, written = _run(tmp_path, ["--export", f"https://u:{TOKEN}@h/x"], {})
    assert code == 2
    assert b"invalid choice" in written["stderr"]
    assert _leaks(written) == {}


# ------------------------------------------------------------------ other commands


def _cli(argv: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, bytes]:
    out, err = io.StringIO(), io.StringIO()
    (tmp_path / ".git").mkdir(exist_ok=True)
    ctx = Context(
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "GITHUB_ACTIONS": "true",
             "ROCMENV_REGISTRY_RETRIES": "0", **(env or {})},
        cwd=tmp_path, stdout=out, stderr=err,
    )  # fmt: skip
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(argv, ctx=ctx)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    finally:
        sys.stdout, sys.stderr = real_out, real_err
    return code, (out.getvalue() + err.getvalue()).encode()


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["ref", "parse", USER_TOKEN_URL], {}),
        (["--debug", "ref", "parse", "--json", BARE_TOKEN_URL], {}),
        (["tags", "parse", USER_TOKEN_URL], {}),
        (["--debug", "validate", USER_TOKEN_URL], {}),
        (["tags", "list", "rocm/sgl-dev"], {"ROCMENV_MIRRORS": f"docker.io=u:{TOKEN}@m:5000"}),
        (["tags", "list", "rocm/sgl-dev"], {"ROCMENV_INSECURE_REGISTRIES": f"{TOKEN}@m:5000"}),
        (["--debug", "options", "--gpus", "none", "--image", USER_TOKEN_URL], {}),
        (["options", "--gpus", USER_TOKEN_URL], {}),
        (["bootstrap", "--no-gpu-wait", f"--remote=-{USER_TOKEN_URL}", "--sglang-pr", "x"], {}),
        (["bootstrap", "--no-gpu-wait", "--sglang-pr", f"{USER_TOKEN_URL}"], {}),
        (["bootstrap", "--no-gpu-wait", "--patch", f"{USER_TOKEN_URL}"], {}),
    ],
)
def test_commands_that_echo_their_input_do_not_echo_a_token(
    tmp_path: Path, argv: list[str], env: dict[str, str]
) -> None:
    code, written = _cli(argv, tmp_path, env)
    assert code == 2, written.decode()
    assert b"***" in written  # the input was shown, masked
    assert TOKEN.encode() not in written


def test_an_internal_error_is_one_redacted_line_and_exit_70(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (an exception that is not a RocmenvError) cannot be produced by input any more,
    so the command is replaced by one that raises; its message carries a token."""
    import rocmenv.cli.ref as ref_cli

    def broken(args: object, ctx: Context) -> int:
        raise RuntimeError(f"cannot reach {USER_TOKEN_URL}")

    monkeypatch.setattr(ref_cli, "run_parse", broken)
    code, written = _cli(["ref", "parse", "x"], tmp_path)
    assert code == 70, written.decode()
    assert b"internal error: RuntimeError" in written and b"Traceback" not in written
    assert TOKEN.encode() not in written
    code, written = _cli(["--debug", "ref", "parse", "x"], tmp_path)
    assert code == 70 and b"Traceback (most recent call last)" in written
    assert TOKEN.encode() not in written


# ------------------------------------------------------------------ secrets by value

#: Values no credential pattern recognises on their own (no ``token=``, no URL, no JWT).
SECRET_ENV = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
    "GH_PAT": "github_pat_11AAAAAAA0bcdefghijklmno_pqrstuvwxyz0123456789",
    "HF_TOKEN": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm0123456789",
}


def _value_leaks(written: dict[str, bytes], values: list[str]) -> dict[str, list[str]]:
    """Which outputs hold which raw value, outside the ``::add-mask::`` lines that tell
    GitHub to hide it (those are the only place a value may be written)."""
    leaks: dict[str, list[str]] = {}
    for name, data in written.items():
        lines = data.decode(errors="replace").splitlines()
        text = "\n".join(ln for ln in lines if not ln.startswith("::add-mask::"))
        found = [v for v in values if v in text]
        if found:
            leaks[name] = found
    return leaks


def _env_printing_python(tmp_path: Path) -> Path:
    """Stands in for pip: `--version` works, `install -e` prints its environment and the
    bare value of $HF_TOKEN on stdout and stderr, then fails."""
    script = tmp_path / "envpython"
    script.write_text(
        '#!/bin/sh\ncase "$*" in *--version*) echo pip 24.0; exit 0;; esac\n'
        'env\necho "$HF_TOKEN"\necho "error: could not use $HF_TOKEN" >&2\nexit 1\n'
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("gha", ["true", "false"])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_failing_install_that_prints_its_environment_writes_no_secret_value(
    tmp_path: Path, checkout: Path, gha: str, json_flag: list[str]
) -> None:
    code, written = _run(
        tmp_path,
        ["--sglang-pr", "feature", "--sglang-path", str(checkout),
         "--python", str(_env_printing_python(tmp_path)), *json_flag],
        {**SECRET_ENV, "GITHUB_ACTIONS": gha},
    )  # fmt: skip
    assert code == 1, written["stderr"].decode()
    assert b"overrides   failed" in written["stderr"]
    # the install's output reached the report and stderr, masked
    assert b"AWS_SECRET_ACCESS_KEY=***" in written["report"]
    assert b"could not use ***" in written["stderr"] and b"could not use ***" in written["summary"]
    assert _value_leaks(written, list(SECRET_ENV.values())) == {}


def test_in_github_actions_every_secret_value_is_masked_before_anything_is_printed(
    tmp_path: Path, checkout: Path
) -> None:
    code, written = _run(
        tmp_path,
        ["--sglang-pr", "feature", "--sglang-path", str(checkout),
         "--python", str(_env_printing_python(tmp_path))],
        {**SECRET_ENV, "GITHUB_ACTIONS": "true"},
    )  # fmt: skip
    assert code == 1
    lines = written["stderr"].decode().splitlines()
    masks = [ln for ln in lines if ln.startswith("::add-mask::")]
    assert sorted(masks) == sorted(f"::add-mask::{v}" for v in SECRET_ENV.values())
    assert lines[: len(masks)] == masks  # first, before any step line
    assert b"add-mask" not in written["stdout"]  # stdout stays eval-able / one JSON document


def test_outside_github_actions_no_mask_command_is_printed(tmp_path: Path, checkout: Path) -> None:
    code, written = _run(
        tmp_path,
        ["--sglang-pr", "feature", "--sglang-path", str(checkout),
         "--python", str(_env_printing_python(tmp_path))],
        {**SECRET_ENV, "GITHUB_ACTIONS": "false"},
    )  # fmt: skip
    assert code == 1
    assert b"add-mask" not in written["stderr"] + written["stdout"]
    assert _value_leaks(written, list(SECRET_ENV.values())) == {}


HF, PAT, AWS = SECRET_ENV["HF_TOKEN"], SECRET_ENV["GH_PAT"], SECRET_ENV["AWS_SECRET_ACCESS_KEY"]


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["ref", "parse", HF], {}),
        (["--debug", "ref", "parse", "--json", PAT], {}),
        (["tags", "parse", AWS], {}),
        (["tags", "list", "rocm/sgl-dev"], {"ROCMENV_MIRRORS": f"docker.io={HF}"}),
        (["--debug", "validate", "--json", HF], {}),
        (["pin", PAT], {}),
        (["resolve", HF], {}),
        (["inspect", "--json", AWS], {}),
        (["diff", HF, PAT], {}),
        (["--debug", "--config", HF, "drift"], {}),
        (["--debug", "options", "--gpus", "none", "--image", AWS], {}),
        (["options", "--gpus", PAT], {}),
        (["--debug", "run", "--gpus", "none", "--image", HF, "--", "true"], {}),
        (["suite", "list", "--json", PAT], {}),
        (["bootstrap", "--no-gpu-wait", "--sglang-pr", f"#{HF}"], {}),
        (["bootstrap", "--no-gpu-wait", "--patch", AWS], {}),
        (["bootstrap", "--export", PAT], {}),
    ],
)
def test_commands_that_echo_their_input_do_not_echo_a_secret_value(
    tmp_path: Path, argv: list[str], env: dict[str, str]
) -> None:
    code, written = _cli(argv, tmp_path, {**SECRET_ENV, **env})
    assert code not in (0, 70), written.decode()
    text = written.decode()
    assert "***" in text  # the input was shown, masked
    assert _value_leaks({"output": written}, list(SECRET_ENV.values())) == {}, text


def test_an_internal_error_with_a_secret_value_in_it_is_masked_with_and_without_debug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rocmenv.cli.ref as ref_cli

    def broken(args: object, ctx: Context) -> int:
        raise RuntimeError(f"the server said {HF} was wrong")

    monkeypatch.setattr(ref_cli, "run_parse", broken)
    for debug in ([], ["--debug"]):
        code, written = _cli([*debug, "ref", "parse", "x"], tmp_path, SECRET_ENV)
        assert code == 70, written.decode()
        assert b"said *** was wrong" in written
        assert (b"Traceback (most recent call last)" in written) == bool(debug)
        assert _value_leaks({"output": written}, list(SECRET_ENV.values())) == {}
