"""README tables that must not drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from rocmenv import errors
from rocmenv.cli import COMMANDS
from rocmenv.settings.profiles import MOUNT_KEYS, PROFILE_KEYS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _table(heading: str) -> list[list[str]]:
    section = README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def test_exit_code_table_matches_errors_module() -> None:
    codes = {int(row[0]) for row in _table("Exit codes")}
    declared = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert codes == declared


def test_every_command_is_documented() -> None:
    documented = {re.match(r"`rocmenv ([a-z]+)", row[0]).group(1) for row in _table("Commands")}  # type: ignore[union-attr]
    rows = " ".join(row[0] for row in _table("Commands"))
    for name in COMMANDS:
        assert name in documented or f"rocmenv {name}" in rows, name


def test_every_profile_key_is_listed() -> None:
    listed = README.split("Profile\nkeys:", 1)[1].split("`", 2)[1].split()
    assert sorted(listed) == sorted(PROFILE_KEYS)


def test_every_mount_key_is_listed() -> None:
    listed = README.split("Mount\nkeys", 1)[1].split("`", 2)[1].split()
    assert sorted(listed) == sorted(MOUNT_KEYS)


def test_the_install_commands_name_the_wheel_pip_builds_by_a_path() -> None:
    """Debian 12's pipx takes a bare ``rocmenv-….whl`` for a package name (issue 30): every
    wheel the install commands name is a ``./dist/`` path, of this version, built by the
    ``pip wheel -w dist`` they show; no placeholder URL."""
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)  # type: ignore[union-attr]
    section = README.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    commands = "".join(re.findall(r"```sh\n(.*?)```", section, re.S))
    assert "pip wheel --no-deps -w dist ." in commands
    wheels = re.findall(r"(\S*\.whl)", commands)
    assert wheels and set(wheels) == {f"./dist/rocmenv-{version}-py3-none-any.whl"}
    assert "OWNER" not in section and "git+https://" not in section
