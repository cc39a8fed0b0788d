"""`rocmenv init`: the profile from a workflow's container block (round trip through
`options --format gha`), the suites from the registrations, refusals that write nothing."""

from __future__ import annotations

import io
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from rocmenv.adopt.dockerflags import option_set, parse_options
from rocmenv.cli import main
from rocmenv.context import Context

ROOT = Path(__file__).resolve().parents[3]
MILES = ROOT / "examples" / "miles-shaped"


def _run(cwd: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env={"HOME": str(cwd)}, cwd=cwd, stdout=out, stderr=err)
    return main(list(argv), ctx=ctx), out.getvalue(), err.getvalue()


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(MILES, repo)
    (repo / ".git").mkdir()
    return repo


def _workflow(repo: Path, options: str, image: str = "rocm/sgl-dev:miles-rocm720-mi35x") -> Path:
    path = repo / ".github" / "workflows" / "w.yml"
    path.write_text(textwrap.dedent(f"""\
        on: push
        jobs:
          t:
            runs-on: [self-hosted, amd]
            container:
              image: {image}
              options: >-
                {options}
            steps:
              - run: true
        """))  # fmt: skip
    return path


def test_init_then_options_gha_renders_the_same_option_set(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    workflow = repo / ".github" / "workflows" / "pr-test-amd.yml"
    code, out, err = _run(repo, "init", "--from-workflow", str(workflow))
    assert code == 0, err
    assert "wrote" in out and "uses: rocmenv/rocmenv@" in out
    import yaml

    options = yaml.safe_load(workflow.read_text())["jobs"]["e2e-test-amd"]["container"]["options"]
    code, rendered, err = _run(repo, "options", "--format", "gha", "-p", "ci")
    assert code == 0, err
    assert option_set(rendered.strip()) == option_set(options)
    code, doc, _ = _run(repo, "options", "--format", "gha", "-p", "ci", "--json")
    assert json.loads(doc)["image"] == "rocm/sgl-dev:miles-rocm720-mi35x"


def test_a_different_option_set_round_trips_too(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    options = (
        "--device /dev/kfd --device /dev/dri --device /dev/infiniband/uverbs0 --group-add video "
        "--ipc=host --shm-size 16g --ulimit nofile=1024:4096 -e HF_HUB_OFFLINE=1 -e HF_TOKEN "
        "-v /models:/models:ro --mount type=bind,source=/data,target=/data -w /workspace "
        "--network=host --label team=ml --cap-drop NET_RAW"
    )
    _run(repo, "init", "--from-workflow", str(_workflow(repo, options)))
    toml = (repo / "rocmenv.toml").read_text()
    assert 'secret-env = ["HF_TOKEN"]' in toml  # a credential is never passed to untrusted runs
    code, rendered, err = _run(repo, "options", "--format", "gha", "-p", "ci")
    assert code == 0, err
    # memory 0 / memory-swap 0: docker's defaults, stated over the rocm base; -w is in the
    # profile but a gha rendering leaves the working directory to Actions
    assert 'workdir = "/workspace"' in toml
    wanted = option_set(options) - {"env:HF_TOKEN", "workdir:/workspace"}
    wanted |= {"memory:0", "memory-swap:0"}
    assert option_set(rendered.strip()) - {"env:HF_TOKEN"} == wanted


def test_flags_a_profile_cannot_express_are_all_listed_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    repo = _copy(tmp_path)
    path = _workflow(
        repo, "--device=/dev/kfd --user 1000 --ipc=host --entrypoint /bin/sh --rm --gpus all"
    )
    code, _, err = _run(repo, "init", "--from-workflow", str(path))
    assert code == 2
    for flag in ("--user 1000", "--entrypoint /bin/sh", "--rm", "--gpus all"):
        assert flag in err
    assert not (repo / "rocmenv.toml").exists()


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        ("exists", [], "exists: init does not overwrite"),
        ("expression", [], "no image to write: give --image"),
        ("options-expression", [], "GitHub expression"),
        ("bad-yaml", [], "not valid YAML"),
        ("none", ["--job", "nope"], "has no job 'nope'"),
    ],
)
def test_refusals_are_usage_errors(
    tmp_path: Path, setup: str, argv: list[str], message: str
) -> None:
    repo = _copy(tmp_path)
    path = _workflow(repo, "--ipc=host")
    if setup == "exists":
        (repo / "rocmenv.toml").write_text("# mine\n")
    elif setup == "expression":
        path = _workflow(repo, "--ipc=host", image="${{ needs.plan.outputs.image }}")
    elif setup == "options-expression":
        path = _workflow(repo, "${{ inputs.options }}")
    elif setup == "bad-yaml":
        path.write_text("jobs: [unclosed\n")
    code, _, err = _run(repo, "init", "--from-workflow", str(path), *argv)
    assert code == 2 and message in err, err
    assert setup == "exists" or not (repo / "rocmenv.toml").exists()
    if setup == "exists":
        assert (repo / "rocmenv.toml").read_text() == "# mine\n"
        assert _run(repo, "init", "--from-workflow", str(path), "--force")[0] == 0


def test_a_registration_init_cannot_read_names_its_line(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    (repo / "tests" / "e2e" / "test_bad.py").write_text(
        "from ci_register import register_rocm_ci\nregister_rocm_ci(EST, 'stage-c-4-gpu-mi350')\n"
    )
    code, _, err = _run(repo, "init", "--image", "rocm/sgl-dev:x")
    assert code == 2 and "tests/e2e/test_bad.py:2" in err


def test_init_does_not_import_yaml_for_other_commands() -> None:
    import subprocess
    import sys

    probe = "import sys, runpy\nsys.argv=['rocmenv','--help']\n"
    probe += (
        "try:\n    runpy.run_module('rocmenv', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    )
    probe += "print('yaml' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip().endswith("False"), done.stdout + done.stderr


def test_parse_options_reads_both_spellings() -> None:
    opts = parse_options("--ipc host --shm-size=32g -v /a:/b:ro --privileged=false -e X")
    assert opts.values == {
        "ipc": ["host"],
        "shm-size": ["32g"],
        "mount": ["/a:/b:ro"],
        "env": ["X"],
    }
    assert not opts.privileged and opts.refused == []
