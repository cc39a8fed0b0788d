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
    # the job's env: comes along: a literal as a value, the expressions passed from the step
    job_env = {"env:MILES_HARDWARE_PLATFORM=rocm", "env:PYTHONPATH", "env:GITHUB_COMMIT_NAME",
               "env:WANDB_API_KEY"}  # fmt: skip
    assert option_set(rendered.strip()) == option_set(options) | job_env
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


SGLANG = ROOT / "examples" / "sglang-shaped"
SGLANG_IMAGE = "rocm/sgl-dev:v0.5.13-rocm720-mi35x-20260601"


def _copy_of(example: Path, tmp_path: Path) -> Path:
    repo = tmp_path / example.name
    shutil.copytree(example, repo)
    (repo / ".git").mkdir()
    return repo


def _init_json(repo: Path, *argv: str) -> dict[str, object]:
    code, out, err = _run(repo, "init", "--json", *argv)
    assert code == 0, err
    return dict(json.loads(out))


def _list(repo: Path, *argv: str) -> dict[str, dict[str, object]]:
    code, out, err = _run(repo, "suite", "list", "--json", *argv)
    assert code == 0, err
    return {s["name"]: s for s in json.loads(out)["suites"]}


def _tests(suite: dict[str, object]) -> list[str]:
    return [str(t["name"]) for t in suite["tests"]]  # type: ignore[attr-defined]


def test_sglang_suites_are_read_with_the_defs_signature_and_named_as_sglang_names_them(
    tmp_path: Path,
) -> None:
    repo = _copy_of(SGLANG, tmp_path)
    done = _init_json(repo, "--from-workflow", ".github/workflows/pr-test-amd.yml",
                      "--image", SGLANG_IMAGE)  # fmt: skip
    files = {s["name"]: s["files"] for s in done["suites"]}  # type: ignore[attr-defined]
    assert files == {"stage-b-test-1-gpu-small-amd-mi35x": 6, "stage-b-test-2-gpu-amd-mi35x": 2,
                     "nightly-amd-8-gpu-mi35x": 1}  # fmt: skip
    toml = (repo / "rocmenv.toml").read_text()
    assert (
        'signature = "est_time, suite=None, nightly=False, disabled=None, *, stage=None, ' in toml
    )
    assert 'glob = "test/registered/**/*.py"' in toml
    suites = _list(repo, "--cadence", "nightly")
    one = _tests(suites["stage-b-test-1-gpu-small-amd-mi35x"])
    # stage + runner_config and the old single string (positional) are one suite
    assert "test/registered/core/test_radix_cache.py" in one
    assert "test/registered/core/test_srt_endpoint.py" in one
    assert "test/registered/core/test_cuda_graph.py" not in one  # CUDA only
    night = suites["nightly-amd-8-gpu-mi35x"]["tests"]
    assert [t["nightly"] for t in night] == [True]  # type: ignore[attr-defined]
    two = suites["stage-b-test-2-gpu-amd-mi35x"]["tests"]
    assert {t["disabled"] for t in two} == {None}  # type: ignore[attr-defined]  # (…, False, None)


def test_without_a_def_in_the_tree_the_known_clients_signature_reads_every_call(
    tmp_path: Path,
) -> None:
    repo = _copy_of(SGLANG, tmp_path)
    (repo / "python" / "sglang" / "test" / "ci" / "ci_register.py").unlink()
    code, _, err = _run(repo, "init", "--image", SGLANG_IMAGE)
    assert code == 0, err
    assert "sglang's signature (no def of it in the tree)" in err
    assert _tests(_list(repo, "--cadence", "nightly")["nightly-amd-8-gpu-mi35x"]) == [
        "test/registered/distributed/test_deepseek_8gpu.py"
    ]


def test_discovery_globs_at_the_test_root_find_a_test_added_in_a_new_directory(
    tmp_path: Path,
) -> None:
    repo = _copy_of(SGLANG, tmp_path)
    _init_json(repo, "--image", SGLANG_IMAGE)
    new = repo / "test" / "registered" / "newly" / "test_new.py"
    new.parent.mkdir()
    new.write_text('register_amd_ci(1, stage="stage-b", runner_config="1-gpu-small-amd-mi35x")\n')
    assert "test/registered/newly/test_new.py" in _tests(
        _list(repo)["stage-b-test-1-gpu-small-amd-mi35x"]
    )
    miles = _copy(tmp_path)
    (miles / "tests" / "e2e" / "helper.py").write_text(
        'register_rocm_ci(1, "stage-c-4-gpu-mi350")\n'
    )
    done = _init_json(miles, "--from-workflow", ".github/workflows/pr-test-amd.yml")
    assert any("so not tests/e2e/helper.py" in n for n in done["notes"])  # type: ignore[attr-defined]
    (miles / "tests" / "fast-gpu").mkdir()
    (miles / "tests" / "fast-gpu" / "test_new.py").write_text(
        'register_rocm_ci(1, "stage-c-4-gpu-mi350", labels=["amd"])\n'
    )
    (miles / "tests" / "fast-gpu" / "helper_new.py").write_text(  # miles reads test_*.py only
        'register_rocm_ci(1, "stage-c-4-gpu-mi350", labels=["amd"])\n'
    )
    listed = _tests(_list(miles, "--labels", "run-ci-amd")["stage-c-4-gpu-mi350"])
    assert "tests/fast-gpu/test_new.py" in listed and "tests/fast-gpu/helper_new.py" not in listed


def test_the_jobs_env_is_carried_and_what_cannot_be_is_listed(tmp_path: Path) -> None:
    repo = _copy_of(SGLANG, tmp_path)
    workflow = repo / ".github" / "workflows" / "pr-test-amd.yml"
    workflow.write_text(workflow.read_text().replace(
        '      SGLANG_AMD_CI: "1"\n', '      SGLANG_AMD_CI: "1"\n      BAD-NAME: x\n'
        "      LIST: [1, 2]\n"))  # fmt: skip
    done = _init_json(repo, "--from-workflow", str(workflow), "--image", SGLANG_IMAGE)
    toml = (repo / "rocmenv.toml").read_text()
    assert 'env = { SGLANG_AMD_CI = "1", SGLANG_IS_IN_CI = "true" }' in toml
    assert 'pass-env = ["HIP_VISIBLE_DEVICES", "PYTHONPATH"]' in toml
    assert 'secret-env = ["HF_TOKEN"]' in toml
    (dropped,) = [n for n in done["notes"] if "not carried" in n]  # type: ignore[attr-defined]
    assert "BAD-NAME" in dropped and "LIST" in dropped
    steps = str(done["steps"])
    assert 'PYTHONPATH: "${{ github.workspace }}/python"' in steps
    assert 'HF_TOKEN: "${{ secrets.HF_TOKEN }}"' in steps


def test_a_job_without_data_mounts_does_not_inherit_the_builtin_ones(tmp_path: Path) -> None:
    repo = _copy_of(SGLANG, tmp_path)
    _init_json(
        repo, "--from-workflow", ".github/workflows/pr-test-amd.yml", "--image", SGLANG_IMAGE
    )
    assert "mounts = []" in (repo / "rocmenv.toml").read_text()
    code, rendered, err = _run(repo, "options", "--format", "gha", "-p", "ci")
    assert code == 0, err
    assert "/data/miles_ci" not in rendered
    miles = _copy(tmp_path)
    _init_json(miles, "--from-workflow", ".github/workflows/pr-test-amd.yml")
    toml = (miles / "rocmenv.toml").read_text()
    assert 'source = "/data/miles_ci/models", target = "/root/models"' in toml  # the job's own


def test_a_miles_tree_gets_miles_label_policy_and_a_plain_pr_selects_nothing(
    tmp_path: Path,
) -> None:
    repo = _copy(tmp_path)
    done = _init_json(repo, "--from-workflow", ".github/workflows/pr-test-amd.yml")
    assert "miles' policy" in str(done["labels"])
    toml = (repo / "rocmenv.toml").read_text()
    assert 'cadence = { nightly = { all-but = ["long", "ft-long"] }, weekly = "all" }' in toml
    assert 'glob = "tests/**/test_*.py"' in toml
    assert _tests(_list(repo)["stage-c-4-gpu-mi350"]) == []
    amd = _tests(_list(repo, "--labels", "run-ci-amd")["stage-c-4-gpu-mi350"])
    assert len(amd) == 8  # 6 enabled + 2 disabled listed; the nightly-only one left out
    nightly = _tests(_list(repo, "--cadence", "nightly")["stage-c-4-gpu-mi350"])
    assert set(nightly) == set(amd) | {"tests/e2e/test_fsdp_soak.py"}


def test_the_printed_steps_run_the_jobs_suite_pinned_with_permissions(tmp_path: Path) -> None:
    import re

    import yaml

    repo = _copy(tmp_path)
    workflow = repo / ".github" / "workflows" / "pr-test-amd.yml"
    workflow.write_text(workflow.read_text().replace(
        "--suite stage-c-4-gpu-mi350", "--suite nightly-stage-c-8-gpu-mi350"))  # fmt: skip
    done = _init_json(repo, "--from-workflow", str(workflow))
    steps = str(done["steps"])
    assert done["suite"] == "nightly-stage-c-8-gpu-mi350"  # not the alphabetically first
    doc = yaml.safe_load(steps)
    assert doc["permissions"] == {"contents": "read"}
    job = doc["jobs"]["e2e-test-amd"]
    assert job["if"] == "needs.plan.outputs.has-tests == 'true'"
    run = job["steps"][-1]["with"]
    assert run["suite"] == "nightly-stage-c-8-gpu-mi350" and "labels" in run
    assert doc["jobs"]["plan"]["steps"][-1]["with"]["labels"].startswith("${{ join(")
    uses = re.findall(r"uses: (\S+)(.*)", steps)
    assert uses and all(re.fullmatch(r"[\w./-]+@[0-9a-f]{40}", u) for u, _ in uses)
    assert all(re.fullmatch(r"  # v\d+\.\d+\.\d+", c) for _, c in uses)
    # the reference CI's container is privileged: refused in untrusted mode, said so
    assert "privileged" in str(done["untrusted"]) and "# Note: untrusted mode" in steps
    sglang = _copy_of(SGLANG, tmp_path)
    quiet = _init_json(sglang, "--from-workflow", ".github/workflows/pr-test-amd.yml",
                       "--image", SGLANG_IMAGE)  # fmt: skip
    assert quiet["untrusted"] is None and quiet["suite"] == "stage-b-test-1-gpu-small-amd-mi35x"
