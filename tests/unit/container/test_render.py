"""What rocmenv writes into text other tools split or run (issue 22, item 2): no value of a
profile or the command line becomes an option or a line of its own, in every mode."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import yaml

from rocmenv.cli import main
from rocmenv.context import Context
from rocmenv.errors import UsageError
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.slurm import job_args

IMAGE = "docker.io/rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"
INJECTED = "x --privileged --volume=/:/host"


def _project(tmp_path: Path, env_value: str, label_key: str = "team x") -> Path:
    root = tmp_path / "checkout"
    (root / ".git").mkdir(parents=True)
    (root / "rocmenv.toml").write_text(
        'default-profile = "p"\n[profiles.p]\nextends = "cpu"\n'
        f"env = {{ A = {json.dumps(env_value)} }}\n"
        f"labels = {{ {json.dumps(label_key)} = {json.dumps(env_value)} }}\n"
    )
    return root


def _options(root: Path, *args: str, untrusted: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(root.parent)}
    if untrusted:
        env["ROCMENV_UNTRUSTED"] = "1"
    ctx = Context(env=env, cwd=root, stdout=out, stderr=err)
    code = main(["options", "--image", IMAGE, "--no-host-check", *args], ctx=ctx)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("untrusted", [False, True])
@pytest.mark.parametrize("fmt", ["gha", "docker"])
@pytest.mark.parametrize("value", [INJECTED, "line\n--privileged", "glob*"])
def test_a_value_that_would_split_into_options_is_refused(
    tmp_path: Path, fmt: str, value: str, untrusted: bool
) -> None:
    """``container.options`` is split on whitespace by the runner, ``$(rocmenv options)`` by
    the shell: a quoted ``'--env=A=x --privileged'`` still gives docker ``--privileged``."""
    root = _project(tmp_path, value)
    code, out, err = _options(root, "--format", fmt, untrusted=untrusted)
    assert code == 2, out
    assert "--env=A=" in err and "cannot carry it" in err
    assert "--privileged" not in out


def test_the_docker_json_list_and_compose_carry_any_value_intact(tmp_path: Path) -> None:
    value = INJECTED + "\n  privileged: true\n\u2028end"
    root = _project(tmp_path, value)
    code, out, err = _options(root, "--format", "docker", "--json")
    assert code == 0, err
    assert f"--env=A={value}" in json.loads(out)["args"]
    code, out, err = _options(root, "--format", "compose")
    assert code == 0, err
    assert "\n  privileged" not in out and "\u2028" not in out  # escaped in the YAML text
    (service,) = yaml.safe_load(out)["services"].values()
    assert "privileged" not in service
    assert service["environment"] == [f"A={value}"]
    assert service["labels"] == {"team x": value}


def test_ordinary_values_render_as_before(tmp_path: Path) -> None:
    root = _project(tmp_path, "expandable_segments:True,max_split=1", label_key="team")
    code, out, err = _options(root, "--format", "gha")
    assert code == 0, err
    assert "--env=A=expandable_segments:True,max_split=1" in out.split()


def test_sbatch_refuses_a_newline_anywhere_in_the_script(tmp_path: Path) -> None:
    root = _project(tmp_path, "ok")
    code, out, err = _options(root, "--format", "sbatch", "--gpus", "0-1", "-e",
                              "B=1\n#SBATCH --prolog=/tmp/evil.sh")  # fmt: skip
    assert code == 2, out
    assert "control character" in err and out == ""
    code, out, err = _options(root, "--format", "sbatch", "--gpus", "0-1", "-e", "B=two words")
    assert code == 0, err  # bash honours quotes: quoted, not refused
    assert "'B=two words'" in out


def test_slurm_arguments_refuse_control_characters_whatever_their_source() -> None:
    """``[slurm]`` is checked when read; the arguments are checked again where they are made
    (a site configuration or a future source goes through the same door)."""
    with pytest.raises(UsageError, match="control character"):
        job_args(SlurmSettings(partition="gpu\n#SBATCH --prolog=/x"), 1, time_seconds=None)
    with pytest.raises(UsageError, match="control character"):
        job_args(SlurmSettings(extra_args=("--qos=ci\r",)), 1, time_seconds=60)
    assert job_args(SlurmSettings(partition="gpu"), 2, time_seconds=None) == [
        "--nodes=1", "--ntasks=1", "--gres=gpu:2", "--partition=gpu",
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", ["docker", "compose", "gha"])
def test_untrusted_renderings_never_mount_the_checkout_writable_and_say_why(
    tmp_path: Path, fmt: str
) -> None:
    """Issue 31: ``run`` gives an untrusted container a copy-on-write view of the checkout,
    which options cannot create: they render it read-only (gha: not at all, Actions mounts
    the workspace) and say so on stderr."""
    root = _project(tmp_path, "plain", label_key="team")
    code, out, err = _options(root, "--format", fmt, untrusted=True)
    assert code == 0, err
    if fmt == "docker":
        assert f"--mount=type=bind,source={root},target={root},readonly" in out.split()
    elif fmt == "compose":
        (service,) = yaml.safe_load(out)["services"].values()
        (view,) = [v for v in service["volumes"] if v["target"] == str(root)]
        assert view["read_only"] is True
    else:
        assert str(root) not in out
    said = "container:` job mounts" if fmt == "gha" else "rendered read-only"
    assert said in err
    assert "--pids-limit=8192" in out or "pids_limit: 8192" in out
