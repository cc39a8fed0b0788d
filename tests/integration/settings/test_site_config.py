"""The administrator sets mirrors and the Slurm partition once, in the site file
(``ROCMENV_SITE_CONFIG`` stands in for ``/etc/rocmenv/config.toml``): a repository without
any of those settings runs ``resolve``, ``run`` and ``suite run --backend slurm`` through
them, in untrusted mode too, and ``config show --origin`` says where each value came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    project_fixture,
)
from tests.support.suite_project import Spec, write_suite

SITE = """
[registry]
mirrors = {{ "docker.io" = ["127.0.0.1:5000"] }}
timeout = 5
[slurm]
partition = "{partition}"
"""


def site_env(project: Project, partition: str = "gpu") -> dict[str, str]:
    site = project.root.parent / "etc-rocmenv" / "config.toml"
    site.parent.mkdir(exist_ok=True)
    site.write_text(SITE.format(partition=partition))
    return {"ROCMENV_SITE_CONFIG": str(site)}


@pytest.mark.parametrize("mode", ["trusted", "untrusted"])
def test_resolve_goes_through_the_site_files_mirror(project: Project, mode: str) -> None:
    env = site_env(project)
    if mode == "untrusted":
        env["ROCMENV_UNTRUSTED"] = "1"
    (project.root / "rocmenv.toml").write_text("")  # the repository says nothing
    done = project.run("resolve", "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215", "--digest",
                       "--json", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["registry"] == "127.0.0.1:5000"
    # without the site file docker.io itself is asked (this machine cannot reach it)
    bare = project.run("resolve", "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215", "--json",
                       env={"ROCMENV_REGISTRY_TIMEOUT": "2", "ROCMENV_REGISTRY_RETRIES": "0"})  # fmt: skip
    assert bare.returncode == 3


def test_an_untrusted_run_pulls_through_the_site_files_trusted_mirror(project: Project) -> None:
    """The policy allows rocm/sgl-dev through a trusted mirror: the site file's is one."""
    env = site_env(project)
    args = ("run", "--untrusted", "--profile", "plain", "--image", project.image, "--", "true")
    done = project.run(*args, env=env)
    assert done.returncode == 0, done.stderr
    refused = project.run(*args)
    assert refused.returncode == 2 and "only images of docker.io/rocm/sgl-dev" in refused.stderr


def test_suite_run_on_slurm_uses_the_site_files_partition_in_untrusted_mode(
    project: Project, slurm: Path
) -> None:
    config = project.root / "rocmenv.toml"
    config.write_text(config.read_text() + "\n[profiles.suite-test]\nextends = \"gpu-test\"\n"
                      f'image = "{project.image}"\ngroup-add = ["video"]\n')  # fmt: skip
    write_suite(project, "sited", [Spec(name="one", gpus=1, est=10, sleep=0.1)])
    hosts = {"ROCMENV_SYSFS_ROOT": str(slurm / "sys"), "ROCMENV_DEV_ROOT": str(slurm / "dev")}
    wrong = project.run("suite", "run", "sited", "--backend", "slurm", "--untrusted", "--json",
                        env={**hosts, **site_env(project, "no-such-partition")}, timeout=120)  # fmt: skip
    # the suite's allocation asked the site's partition, which Slurm refused (exit 4)
    assert wrong.returncode == 4, wrong.stderr
    assert "in partition no-such-partition" in wrong.stderr
    assert "Invalid partition" in wrong.stderr, wrong.stderr
    done = project.run("suite", "run", "sited", "--backend", "slurm", "--untrusted", "--json",
                       env={**hosts, **site_env(project)}, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [t["status"] for t in json.loads(done.stdout)["tests"]] == ["passed"]


def test_config_show_origin_names_the_site_file_for_its_values(project: Project) -> None:
    env = site_env(project)
    done = project.run("config", "show", "--origin", "--untrusted", env=env)
    assert done.returncode == 0, done.stderr
    lines = {line.split(" ", 1)[0]: line for line in done.stdout.splitlines()}
    site = env["ROCMENV_SITE_CONFIG"]
    assert lines["registry.mirrors"].endswith(f"# site: {site}")
    assert lines["slurm.partition"].endswith(f'"gpu"  # site: {site}')
    assert lines["registry.retries"].endswith("# default")
