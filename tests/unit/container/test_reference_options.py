"""The container options of the reference ROCm CI, written out here by hand, against what
rocmenv ships: the built-in ``rocm`` profile and the example workflow ``pr-rocm.yml``.

Independent of ``rocmenv options`` (whose output the workflow was rendered from): the
reference list is a literal copied from the reference CI's ``docker run`` line, and both
sides go through a small normaliser of docker's own option semantics (``--ulimit nofile=N``
is ``N:N``; ``-v a:b`` is a bind mount; ``--opt value`` is ``--opt=value``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from rocmenv.container.guard import UNTRUSTED_CAP_DROP

WORKFLOW = Path(__file__).resolve().parents[3] / "docs" / "workflows" / "pr-rocm.yml"

# The reference CI's container options (its `docker run` line), minus the opt-in privileged.
REFERENCE = (
    "--device=/dev/kfd --device=/dev/dri --group-add video --group-add render "
    "--security-opt seccomp=unconfined --cap-add=SYS_PTRACE --ipc=host --shm-size=32g "
    "--ulimit memlock=-1 --ulimit stack=67108864 --ulimit nofile=65535:65535 "
    "-v /data/miles_ci:/data/miles_ci"
)
# What rocmenv adds on purpose (docs/profiles.md "Built-in profiles"): no-op memory limits, the data
# mounts the reference CI's jobs use, and HIP_VISIBLE_DEVICES passed through.
DOCUMENTED_EXTRAS = {
    ("--memory", "0"),
    ("--memory-swap", "0"),
    ("--mount", "/data/miles_ci/models:/root/models"),
    ("--mount", "/data/miles_ci/datasets:/root/datasets"),
    ("--mount", "/data/miles_ci/hf_cache:/root/.cache/huggingface"),
    ("--env", "HIP_VISIBLE_DEVICES"),
}
TAKES_VALUE = {"--device", "--group-add", "--security-opt", "--cap-add", "--ipc", "--shm-size",
               "--ulimit", "--memory", "--memory-swap", "--mount", "-v", "--volume", "--env",
               "-e"}  # fmt: skip


def normalise(options: str) -> set[tuple[str, str]]:
    """Docker options → a set of (option, canonical value)."""
    words = shlex.split(options)
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if "=" in word and word.startswith("--"):
            name, value = word.split("=", 1)
        elif word in TAKES_VALUE:
            name, value = word, words[i + 1]
            i += 1
        else:
            name, value = word, ""
        i += 1
        pairs.append((name, value))
    out: set[tuple[str, str]] = set()
    for name, value in pairs:
        if name == "--ulimit":
            limit, _, numbers = value.partition("=")
            soft, _, hard = numbers.partition(":")
            value = f"{limit}={soft}:{hard or soft}"
        elif name in ("-v", "--volume"):
            src, dst, *opts = value.split(":")
            name, value = "--mount", f"{src}:{dst}" + (":ro" if "ro" in opts else "")
        elif name == "--mount":
            fields = dict(f.partition("=")[::2] for f in value.split(","))
            assert fields.get("type") == "bind", value
            value = f"{fields['source']}:{fields['target']}"
            if "readonly" in value or "readonly" in fields:
                value += ":ro"
        elif name == "-e":
            name = "--env"
        out.add((name, value))
    return out


def workflow_literals() -> list[str]:
    text = WORKFLOW.read_text()
    return re.findall(r"^\s*(?:&&|\|\|) '([^']*)'", text, re.MULTILINE)


def test_the_normaliser_knows_dockers_equivalences() -> None:
    assert normalise("--ulimit nofile=5") == normalise("--ulimit=nofile=5:5")
    assert normalise("-v /a:/b") == normalise("--mount=type=bind,source=/a,target=/b")
    assert normalise("--volume=/a:/b:ro") == normalise(
        "--mount=type=bind,source=/a,target=/b,readonly"
    )
    assert normalise("-v /a:/b:ro") != normalise("-v /a:/b")
    assert normalise("--group-add video") == normalise("--group-add=video")
    assert normalise("--ulimit nofile=5") != normalise("--ulimit nofile=5:6")


def test_the_trusted_workflow_options_are_the_reference_plus_documented_extras() -> None:
    trusted, untrusted = workflow_literals()
    ours = normalise(trusted)
    reference = normalise(REFERENCE)
    assert reference - ours == set(), "reference options the workflow lacks"
    assert ours - reference == DOCUMENTED_EXTRAS, "options the workflow adds"
    # the untrusted variant: the default policy (docs/security.md "Running untrusted code")
    # drops the reference's debugger/profiler options and host IPC, drops the default
    # capabilities a planted file would use, makes data mounts read-only and adds the caps
    # (issue 31: a pids limit, no core files, no raised or real-time priority; the memory
    # share is not rendered for another host)
    policy_drops = {("--cap-add", "SYS_PTRACE"), ("--security-opt", "seccomp=unconfined"),
                    ("--ipc", "host")}  # fmt: skip
    cap_drops = {("--cap-drop", c) for c in UNTRUSTED_CAP_DROP}
    caps = {("--pids-limit", "8192"), ("--ulimit", "core=0:0"), ("--ulimit", "nice=0:0"),
            ("--ulimit", "rtprio=0:0")}  # fmt: skip
    ro = {(n, v.removesuffix(":ro")) if n == "--mount" else (n, v) for n, v in normalise(untrusted)}
    assert ro == (ours - policy_drops) | {("--ipc", "private")} | cap_drops | caps
    assert all(v.endswith(":ro") for n, v in normalise(untrusted) if n == "--mount")


def test_the_builtin_rocm_profile_renders_the_reference_options() -> None:
    """``--format gha`` (the job-container string: device paths as on a GPU runner)."""
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [sys.executable, "-m", "rocmenv", "options", "--format", "gha", "--profile", "rocm",
             "--group-names"],
            capture_output=True, text=True, cwd=scratch, check=True,
            env={"PATH": "/usr/bin:/bin", "HOME": scratch},
        )  # fmt: skip
    ours = normalise(done.stdout.strip())
    assert normalise(REFERENCE) <= ours
    assert ours - normalise(REFERENCE) == DOCUMENTED_EXTRAS
