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
