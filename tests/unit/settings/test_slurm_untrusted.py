"""A fork's [slurm] settings never reach srun/sbatch in untrusted mode (issue 9 + 12)."""

from __future__ import annotations

from pathlib import Path

from rocmenv.context import Context
from rocmenv.settings.resolve import settings_for
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.runner import load

FORK = """default-profile = "ci"
[profiles.ci]
extends = "cpu"
image = "rocm/sgl-dev"
tag = "v0.5.8-rocm700-mi30x-20260215"
{untrusted}
[slurm]
account = "victim"
extra-args = ["--uid=0", "--export=ALL"]
[suites.s]
profile = "ci"
tests = [{{ path = "t.py" }}]
[suites.s.slurm]
partition = "admin"
"""


def fork(tmp_path: Path, untrusted: str = "") -> Path:
    (tmp_path / ".git").mkdir(parents=True)
    (tmp_path / "rocmenv.toml").write_text(FORK.format(untrusted=untrusted))
    (tmp_path / "t.py").write_text("")
    return tmp_path


def ctx(root: Path, **env: str) -> Context:
    return Context(env={"HOME": str(root), **env}, cwd=root)


def test_trusted_mode_uses_the_files_slurm_settings(tmp_path: Path) -> None:
    root = fork(tmp_path)
    suite = load(ctx(root), "s").suite
    assert suite.slurm.extra_args == ("--uid=0", "--export=ALL")
    assert suite.slurm.partition == "admin" and suite.slurm.account == "victim"
    assert settings_for(ctx(root)).slurm.extra_args == ("--uid=0", "--export=ALL")


def test_untrusted_mode_ignores_the_checkouts_slurm_settings(tmp_path: Path) -> None:
    root = fork(tmp_path)
    assert load(ctx(root, ROCMENV_UNTRUSTED="1"), "s").suite.slurm == SlurmSettings()
    assert settings_for(ctx(root, ROCMENV_UNTRUSTED="yes")).slurm == SlurmSettings()


def test_a_profile_that_says_untrusted_ignores_them_too(tmp_path: Path) -> None:
    root = fork(tmp_path, untrusted="untrusted = true")
    assert load(ctx(root), "s").suite.slurm == SlurmSettings()


def test_a_trusted_config_outside_the_checkout_keeps_them(tmp_path: Path) -> None:
    root = fork(tmp_path / "fork")
    outside = tmp_path / "trusted.toml"
    outside.write_text((root / "rocmenv.toml").read_text())
    (root / "rocmenv.toml").unlink()
    env = {"ROCMENV_UNTRUSTED": "1", "ROCMENV_CONFIG": str(outside)}
    suite = load(ctx(root, **env), "s").suite
    assert suite.slurm.extra_args == ("--uid=0", "--export=ALL")
