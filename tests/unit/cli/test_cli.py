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
    code = main(["run", "-p", "rcom", "--", "true"])
    err = capsys.readouterr().err
    assert code == 2  # a usage/config error, as for every command (125: the engine failed)
    assert err.startswith("rocmenv run: error: unknown profile 'rcom' (did you mean 'rocm'?)")


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


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
