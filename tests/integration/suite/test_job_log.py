"""Issue 31: an untrusted ``suite run`` inside GitHub Actions whose fork names its tests like
workflow commands, commits a test file named like one, gives a disabled test a reason full of
markdown, HTML and newlines, and whose test prints every workflow command it can in its
container. The step's job log, read as GitHub's runner reads it, holds rocmenv's commands
only, and rocmenv's annotation after the run (untrusted times are not learned) is read; the
step summary, rendered by GitHub's cmark-gfm, shows the strings and makes no image, link,
heading or row of them; the JUnit file is valid."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import cmarkgfm
from cmarkgfm.cmark import Options

from tests.support import testenv
from tests.support.gha_runner import ATTACK, read_job_log
from tests.support.junit_check import check_junit
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    project_fixture,
)

REASON = (
    "![b](http://127.0.0.1:9/beacon.png) <img src=http://127.0.0.1:9/b.png> | fake | cell |\n"
    "### ✅ all passed\n::error::PWNED-reason"
)
NAMES = {
    # (braces doubled: a suite's cmd is a template of {path} and {name})
    "::set-output name=image::PWNED-name": (ATTACK + "\nexit 3")
    .replace("{", "{{")
    .replace("}", "}}"),
    "x ##[add-mask]PWNED-mid": "true",
    "  ::stop-commands::pwnedname": "true",
}
DISCOVERED = "disc/##[set-output name=digest;]PWNED-file.py"


def hostile_suite(project: Project) -> None:
    rows = [
        f"  {{ path = \"t/{i}.py\", name = {json.dumps(name)}, gpus = 0, est-time = 5, "
        f"cmd = {json.dumps(['sh', '-c', script])} }}"
        for i, (name, script) in enumerate(NAMES.items())
    ]  # fmt: skip
    rows.append(f'  {{ path = "t/off.py", disabled = {json.dumps(REASON)} }}')
    (project.root / "disc").mkdir()
    (project.root / DISCOVERED).write_text("register_rocm_ci(est_time=5, suite='hostile')\n")
    config = project.root / "rocmenv.toml"
    config.write_text(
        config.read_text()
        + f'\n[profiles.fork-suite]\nextends = "plain"\nimage = "{project.image}"\n'
        + '\n[suites.hostile]\nprofile = "fork-suite"\ngpus = 0\ncmd = ["true"]\n'
        + "tests = [\n" + ",\n".join(rows) + "\n]\n"
        + '[suites.hostile.discover]\nglob = "disc/*.py"\ncall = "register_rocm_ci"\n'
        + 'select = { suite = "hostile" }\n'
    )  # fmt: skip


def test_an_untrusted_suites_names_reasons_and_output_issue_no_workflow_command(
    project: Project, tmp_path: Path
) -> None:
    hostile_suite(project)
    summary = tmp_path / "summary.md"
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = project.env({
        "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(tmp_path / "output"), "ROCMENV_UNTRUSTED": "1",
        "RUNNER_TEMP": str(runner_temp), "ROCMENV_MIRRORS": f"docker.io={testenv.OPEN_REGISTRY}",
    })  # fmt: skip
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "rocmenv", "suite", "run", "hostile", "--engine", "docker-cli",
         "--junit", str(junit)],
        cwd=project.cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr.decode(errors="replace")  # the attacker's test failed
    runner, worst = read_job_log(done.stdout, done.stderr)
    assert worst == [], worst
    for c in runner.commands:  # rocmenv's: titled annotations, its own closed fences
        if c.name == "stop-commands":
            assert c.data in runner.resumed
        else:
            assert c.name in ("error", "warning") and c.properties["title"].startswith("rocmenv")
    assert runner.stop_token is None and runner.outputs() == {} and runner.masks() == []
    assert any("not recorded" in c.data for c in runner.annotations())  # after the run: read
    rows = [line for line in done.stdout.decode().splitlines() if "PWNED-name" in line]
    assert len(rows) == 1 and rows[0].startswith("\\u003a:set-output")  # the table's first column

    rendered = str(cmarkgfm.github_flavored_markdown_to_html(
        summary.read_text(), options=Options.CMARK_OPT_UNSAFE))  # fmt: skip
    for tag in ("<img", "<a ", "<script"):
        assert tag not in rendered, rendered
    assert len(re.findall(r"<h[1-6]", rendered)) == 1  # rocmenv's own heading
    assert rendered.count("<tr>") == 1 + len(NAMES) + 2  # + the discovered and the disabled
    assert "skipped: disabled: " + html.escape(REASON.split("\n")[0], quote=False) in rendered

    root, _ = check_junit(junit.read_text(), tmp_path)
    failure = next(iter(root.iter("failure")))
    assert failure.text is not None and "PWNED-image" in failure.text  # the log, shown
    assert "\\u003a:set-output name=image::PWNED-image" in failure.text


def test_an_untrusted_run_as_a_slurm_job_is_fenced_too(project: Project, slurm: Path) -> None:
    """``run --backend slurm``: ``srun`` carries the node-side rocmenv's output and its
    container's; the submitting rocmenv fences all of it."""
    config = project.root / "rocmenv.toml"
    config.write_text(
        config.read_text()
        + f'\n[profiles.fork-run]\nextends = "plain"\nimage = "{project.image}"\n'
    )
    env = project.env({
        "GITHUB_ACTIONS": "true", "ROCMENV_UNTRUSTED": "1",
        "ROCMENV_SYSFS_ROOT": str(slurm / "sys"), "ROCMENV_DEV_ROOT": str(slurm / "dev"),
        "ROCMENV_MIRRORS": f"docker.io={testenv.OPEN_REGISTRY}",
    })  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "rocmenv", "run", "--backend", "slurm", "--profile", "fork-run",
         "--gpus", "0", "--", "sh", "-c", ATTACK],
        cwd=project.cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=180,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    runner, worst = read_job_log(done.stdout, done.stderr)
    assert worst == [] and not [c for c in runner.commands if "PWNED" in repr(c)]
    assert runner.stop_token is None and runner.outputs() == {} and runner.masks() == []
    assert "PWNED indented" in "\n".join(runner.lines)  # it ran, and its output is shown
    assert project.containers() == []
