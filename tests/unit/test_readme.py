"""The README and the docs' tables that must not drift from the code, and the README's shape:
short, install → first command → adoption on its first screen, the contributor's two commands
true (issue 33)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from rocmenv import errors
from rocmenv.cli import COMMANDS
from rocmenv.settings.declared import MOUNT_KEYS
from rocmenv.settings.profiles import PROFILE_KEYS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()
COMMANDS_DOC = (ROOT / "docs" / "commands.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
#: The first screen of the README: what a reader sees before scrolling.
FIRST_SCREEN = 40


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _table(text: str, heading: str) -> list[list[str]]:
    rows = [line for line in _section(text, heading).splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def _sh_commands(section: str) -> list[str]:
    """The commands of a section's ```sh blocks, comments and continuation lines dropped."""
    lines = "".join(re.findall(r"```sh\n(.*?)```", section, re.S)).splitlines()
    return [line.split("  #", 1)[0].strip() for line in lines if line.strip()]


def test_exit_code_table_matches_errors_module() -> None:
    codes = {int(row[0]) for row in _table(COMMANDS_DOC, "Exit codes")}
    declared = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert codes == declared


def test_every_command_is_documented() -> None:
    table = _table(COMMANDS_DOC, "Every command")
    documented = {re.match(r"`rocmenv ([a-z]+)", row[0]).group(1) for row in table}  # type: ignore[union-attr]
    rows = " ".join(row[0] for row in table)
    for name in COMMANDS:
        assert name in documented or f"rocmenv {name}" in rows, name


def test_every_profile_key_is_listed() -> None:
    listed = CONFIGURATION.split("Profile\nkeys:", 1)[1].split("`", 2)[1].split()
    assert sorted(listed) == sorted(PROFILE_KEYS)


def test_every_mount_key_is_listed() -> None:
    listed = CONFIGURATION.split("Mount\nkeys", 1)[1].split("`", 2)[1].split()
    assert sorted(listed) == sorted(MOUNT_KEYS)


def test_the_install_commands_name_the_wheel_pip_builds_by_a_path() -> None:
    """Debian 12's pipx takes a bare ``rocmenv-….whl`` for a package name (issue 30): every
    wheel the install commands name — the README's and docs/install.md's — is a ``./dist/``
    path, of this version, built by the ``pip wheel -w dist`` they show; no placeholder URL."""
    from rocmenv import __version__ as version  # the one place (hatch's version source)

    install = (ROOT / "docs" / "install.md").read_text()
    for section in (_section(README, "Install"), install):
        commands = "".join(re.findall(r"```sh\n(.*?)```", section, re.S))
        assert "pip wheel --no-deps -w dist ." in commands
        wheels = re.findall(r"(\S*\.whl)", commands)
        assert wheels and set(wheels) == {f"./dist/rocmenv-{version}-py3-none-any.whl"}
        assert "OWNER" not in section and "git+https://" not in section


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 250


def test_the_first_screen_shows_install_then_a_first_command_then_adoption() -> None:
    """Issue 33: a fresh reader finds install → first command → adoption without scrolling:
    the three sections start on the first screen, in that order, each with a command block,
    and the quick start needs no root and no test bed."""
    first = "\n".join(README.splitlines()[:FIRST_SCREEN])
    starts = [first.find(f"\n## {h}\n") for h in ("Install", "Quick start", "Adopting it in CI")]
    assert -1 not in starts and starts == sorted(starts), starts
    assert any(c.startswith("pipx install ") for c in _sh_commands(_section(README, "Install")))
    quick = _sh_commands(_section(README, "Quick start"))
    assert any(c.startswith("rocmenv run ") for c in quick)
    assert not any(c.startswith(("sudo ", "scripts/")) for c in quick)
    adopt = _sh_commands(_section(README, "Adopting it in CI"))
    assert adopt[0].startswith("rocmenv init --from-workflow ")


def test_the_contributor_commands_are_two_and_the_same_in_readme_and_contributing() -> None:
    readme = _sh_commands(_section(README, "Contributing"))
    contributing = _sh_commands(_section(CONTRIBUTING, "Two commands"))
    assert readme == contributing and len(readme) == 2


def test_ci_runs_the_test_command_the_readme_gives() -> None:
    """The second contributor command is what `.ci/run` executes (with no arguments), and the
    first is the demo that tests/integration/test_demo.py runs."""
    demo, test = _sh_commands(_section(README, "Contributing"))
    ci = (ROOT / ".ci" / "run").read_text()
    execs = [shlex.split(line)[1:] for line in ci.splitlines() if line.startswith("exec ")]
    assert execs == [shlex.split(test)]
    assert (ROOT / test).is_file() and (ROOT / demo).is_file()
    demo_test = (ROOT / "tests" / "integration" / "test_demo.py").read_text()
    parts = Path(demo).parts
    assert f"[str(REPO / {' / '.join(repr(p) for p in parts)})]".replace("'", '"') in demo_test
