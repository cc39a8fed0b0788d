"""``rocmenv config show [--origin] [--json]``: every effective setting and where it came
from (flag, variable, profile, site, user, project, default)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from rocmenv.cli import main
from rocmenv.context import Context
from rocmenv.settings.registry import REGISTRY_KEYS
from rocmenv.settings.slurm import SLURM_KEYS


def show(root: Path, *args: str, **env: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env={"HOME": str(root), **env}, cwd=root, stdout=out, stderr=err)
    code = main(["config", "show", *args], ctx=ctx)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An administrator's site file (mirrors, Slurm partition), a user file, and a repository
    that sets none of those."""
    site = tmp_path / "etc" / "config.toml"
    site.parent.mkdir()
    site.write_text(
        '[registry]\nmirrors = { "docker.io" = ["mirror.lan:5000"] }\n'
        '[slurm]\npartition = "mi300x"\n[policy]\nmount-sources = ["/data"]\n'
    )
    user = tmp_path / "xdg" / "rocmenv" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('engine = "podman"\n[registry]\ntimeout = 12\n')
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "rocmenv.toml").write_text('[profiles.ci]\nextends = "cpu"\n[slurm]\naccount = "ml"\n')
    env = {"ROCMENV_SITE_CONFIG": str(site), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    return repo, env


def by_key(stdout: str) -> dict[str, dict[str, Any]]:
    doc = json.loads(stdout)
    return {row["key"]: row for row in doc["settings"]}


def test_show_origin_explains_every_value_by_its_level_and_source(
    machine: tuple[Path, dict[str, str]],
) -> None:
    repo, env = machine
    code, out, _ = show(repo, "--json", "--profile", "ci", ROCMENV_REGISTRY_RETRIES="2", **env)
    assert code == 0
    rows = by_key(out)
    site, user = (
        env["ROCMENV_SITE_CONFIG"],
        str(Path(env["XDG_CONFIG_HOME"]) / "rocmenv/config.toml"),
    )
    expected = {
        "profile": ("ci", "flag", "--profile"),
        "engine": ("podman", "user", user),
        "registry.mirrors": ({"docker.io": ["mirror.lan:5000"]}, "site", site),
        "registry.timeout": (12.0, "user", user),
        "registry.retries": (2, "env", "ROCMENV_REGISTRY_RETRIES"),
        "registry.max-pages": (1000, "default", "built-in"),
        "slurm.partition": ("mi300x", "site", site),
        "slurm.account": ("ml", "project", str(repo / "rocmenv.toml")),
        "policy.mount-sources": (["/data"], "site", site),
        "lockfile": (str(repo / "rocmenv.lock"), "default", "built-in"),
    }
    for key, (value, origin, where) in expected.items():
        assert (rows[key]["value"], rows[key]["origin"], rows[key]["where"]) == (
            value,
            origin,
            where,
        ), key
    # every key of every table is explained
    assert {f"registry.{k}" for k in REGISTRY_KEYS} | {f"slurm.{k}" for k in SLURM_KEYS} <= set(
        rows
    )
    assert json.loads(out)["files"] == {
        "site": site,
        "user": user,
        "project": str(repo / "rocmenv.toml"),
    }


def test_show_text_names_the_origin_of_each_line(machine: tuple[Path, dict[str, str]]) -> None:
    repo, env = machine
    code, out, err = show(repo, "--origin", **env)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("slurm.partition "))
    assert line.endswith(f'"mi300x"  # site: {env["ROCMENV_SITE_CONFIG"]}')
    assert "policy.* apply in untrusted mode only" in err
    plain = show(repo, **env)[1]
    assert "#" not in plain and "slurm.partition" in plain


def test_show_in_untrusted_mode_keeps_the_site_and_drops_the_checkouts_tables(
    machine: tuple[Path, dict[str, str]],
) -> None:
    repo, env = machine
    code, out, _ = show(repo, "--json", "--untrusted", **env)
    assert code == 0
    rows = by_key(out)
    assert rows["slurm.partition"]["origin"] == "site"
    assert rows["slurm.account"]["origin"] == "default"  # the checkout's [slurm] is not read
    assert rows["untrusted"] == {
        "key": "untrusted",
        "value": True,
        "origin": "flag",
        "where": "--untrusted",
    }
    assert any("[slurm]" in note for note in json.loads(out)["notes"])


def test_show_reports_a_bad_site_file_as_a_config_error(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    site = tmp_path / "site.toml"
    site.write_text("[registry]\nmirors = {}\n")
    code, _, err = show(tmp_path, ROCMENV_SITE_CONFIG=str(site))
    assert code == 2
    assert f"unknown key 'mirors' in [registry] in site configuration {site}" in err
    assert "did you mean 'mirrors'" in err
