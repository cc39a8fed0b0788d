"""The CLI frame: error paragraphs, exit codes, lazy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rocmenv.cli import main


def test_error_names_the_subcommand_not_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--profile", "rcom", "--", "true"])
    err = capsys.readouterr().err
    assert code == 2  # a usage/config error, as for every command (125: the engine failed)
    assert err.startswith("rocmenv run: error: unknown profile 'rcom' (did you mean 'rocm'?)")


def test_help_imports_neither_engine_library_nor_http() -> None:
    code = (
        "import sys\n"
        "from rocmenv.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('docker', 'python_on_whales', 'pydantic', 'requests', 'http.client', 'rocmenv.registry') if m in sys.modules]\n"
        "sys.stderr.write('heavy=' + ','.join(heavy))\n"
    )
    err = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stderr
    assert err.strip() == "heavy="


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True), ("GITHUB_TOKEN", True), ("hf_token", True),
        ("AWS_SECRET_ACCESS_KEY", True), ("OPENAI_API_KEY", True), ("WANDB_APIKEY", True),
        ("GH_PAT", True), ("PAT", True), ("AZURE_PAT_RO", True), ("PGPASSWORD", True),
        ("DB_PASSWD", True), ("GPG_PASSPHRASE", True), ("GOOGLE_CREDENTIALS", True),
        ("TOKENIZERS_PARALLELISM", True),  # by name; its value ("false") is not masked
        # PAT only as a whole word
        ("PATH", False), ("PYTHONPATH", False), ("LD_LIBRARY_PATH", False), ("PATCH", False),
        ("DISPATCH_MODE", False), ("SYSTEM_VERSION_COMPAT", False), ("PATTERN", False),
        # where a secret is, not the secret
        ("HF_TOKEN_PATH", False), ("AWS_SHARED_CREDENTIALS_FILE", False),
        ("SECRETS_DIR", False),
        ("KEYBOARD", False), ("HOME", False), ("GITHUB_ACTIONS", False), ("PASSENV", False),
    ],
)  # fmt: skip
def test_which_environment_variables_look_secret(name: str, secret: bool) -> None:
    from rocmenv.cli import looks_secret

    assert looks_secret(name) is secret


def _help_in_subprocess(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        "from rocmenv.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('redact=' + str('rocmenv.redact' in sys.modules))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )


def test_help_imports_nothing_for_secrets_unless_a_secret_looking_variable_is_set() -> None:
    import os

    base = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path),
            "GITHUB_ACTIONS": "true", "TOKEN_CACHE_DIR": "/tmp"}  # fmt: skip
    plain = _help_in_subprocess(base)
    assert plain.stderr.endswith("redact=False") and "add-mask" not in plain.stderr
    masked = _help_in_subprocess({**base, "HF_TOKEN": "hf_TokenForTheHelpTest0123"})
    assert masked.stderr.startswith("::add-mask::hf_TokenForTheHelpTest0123\n")
    assert masked.stderr.endswith("redact=True")


def test_an_argparse_error_masks_a_secret_value_and_announces_it_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The mask comes before argparse prints anything; a multi-line value is announced line
    by line (one ``::add-mask::`` cannot span lines: the rest would be printed in clear);
    ``%`` is escaped as GitHub's workflow commands require."""
    from rocmenv.context import Context

    key = "line-one-0001\nline%two-0002\n"
    value = "hf_ArgparseSecret0123"
    ctx = Context(env={"GITHUB_ACTIONS": "true", "HF_TOKEN": value, "SSH_PRIVATE_KEY": key})
    with pytest.raises(SystemExit) as exit_:
        main(["tags", "list", "--page-size", value], ctx=ctx)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[:3] == ["::add-mask::hf_ArgparseSecret0123", "::add-mask::line-one-0001",
                         "::add-mask::line%25two-0002"]  # fmt: skip
    assert "invalid" in lines[-2] and "'***'" in lines[-2]
    assert not any(value in ln for ln in lines[3:])


@pytest.mark.parametrize(
    "argv",
    [["suite", "run", "x", "--debug"], ["tags", "list", "r", "--config", "rocmenv.toml"]],
)
def test_a_global_option_after_the_command_says_where_it_goes(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "did you mean '--debug'" for ``--debug``: the flag is right, its place is not."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    flag = argv[3]
    assert f"{flag!r} is an option of rocmenv itself: give it before the command" in err
    assert f"`rocmenv {flag} COMMAND" in err and "did you mean" not in err


@pytest.mark.parametrize(
    ("argv", "error", "suggestion"),
    [
        (["run", "--untr", "--", "true"], "unrecognized arguments: --untr", "'--untrusted'"),
        (["run", "--gpu", "0", "--", "true"], "unrecognized arguments: --gpu", "'--gpus'"),
        (["tags", "list", "r", "--gpus", "mi30x"], "unrecognized arguments: --gpus", "'--gpu'"),
        (["shims", "check", "--ima", "x"], "unrecognized arguments: --ima", "'--image'"),
        (["config", "show", "--orig"], "unrecognized arguments: --orig", "'--origin'"),
        (["rn"], "invalid choice: 'rn'", "'run'"),
        (["shims", "chek"], "invalid choice: 'chek'", "'check'"),
        (["run", "--engine", "podmn", "--", "true"], "invalid choice: 'podmn'", "'podman'"),
    ],
)
def test_no_prefix_abbreviations_and_a_did_you_mean(
    argv: list[str], error: str, suggestion: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """As docker, gh and crane: a prefix of a flag is not the flag (``--untr`` is not
    ``--untrusted``, sub-parsers included), and the error names the closest one."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert error in err
    assert f"did you mean {suggestion}?" in err


def test_gpu_help_shows_the_family_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["resolve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "mi30x (mi300x, mi300a, mi325x, gfx942), mi35x (mi350x, mi355x, gfx950)" in out


@pytest.mark.parametrize("columns", ["30", "72", "200", "", "junk"])
def test_help_is_formatted_to_the_width_argparse_itself_would_use(
    columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from rocmenv.cli import build_parser

    monkeypatch.setenv("COLUMNS", columns)
    ours = build_parser("run")
    theirs = build_parser("run")
    for parser in (theirs, *theirs._subparsers._group_actions[0].choices.values()):  # type: ignore[union-attr]
        parser.formatter_class = argparse.HelpFormatter  # shutil.get_terminal_size's width
    assert ours.format_help() == theirs.format_help()
    run_ours = ours._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr,index]
    run_theirs = theirs._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr,index]
    assert run_ours.format_help() == run_theirs.format_help()


def test_collection_resumes_with_what_start_up_made_frozen() -> None:
    import gc

    from rocmenv.cli import resume_collection

    # Python 3.12 starts with a few hundred objects in the permanent generation already
    before = gc.get_freeze_count()
    resume_collection()  # enabled (a test, an embedding): nothing to do
    assert gc.isenabled() and gc.get_freeze_count() == before
    gc.disable()  # as `rocmenv run` does for its start-up
    try:
        resume_collection()
        assert gc.isenabled() and gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
        gc.enable()
