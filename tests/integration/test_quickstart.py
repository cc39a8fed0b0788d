"""The README's quick start, as written but for the tag: its command block runs with bash in
an empty directory, rocmenv on PATH, the local registry as Docker Hub's mirror. The one change:
the profile's tag constraints become the `tag` of the stand-in image whose aiter predates
shuffle_scale (the local registry's newest 0.5.8 nightlies are small stubs without Python), so
`run` shows the shim applied as the README says it does on such an image."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: The stand-in image with amd-aiter 0.1.9.post1 (examples/rocmenv.toml's demo tag).
OLD_AITER_TAG = "v0.5.8-rocm700-mi30x-20260215"


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the README's quick start is one command block"
    return str(blocks[0])


def test_the_readme_quick_start_pins_and_runs_with_the_shim_applied(tmp_path: Path) -> None:
    script = quick_start()
    constraint = re.compile(r"^(?:sglang|rocm|gpu|family|before) = .*\n", re.M)
    assert constraint.search(script), "the quick start's profile has no tag constraint"
    script = constraint.sub("", script, count=0).replace(
        'image = "rocm/sgl-dev"\n', f'image = "rocm/sgl-dev"\ntag = "{OLD_AITER_TAG}"\n', 1
    )
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ROCMENV_", "GITHUB_")) and k != "PYTHONPATH"}  # fmt: skip
    env |= {
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
        "ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000",  # the machine's mirror, not Docker Hub
        "ROCMENV_PULL_FROM_MIRROR": "1",
        "HOME": str(tmp_path),
    }
    work = tmp_path / "try"
    work.mkdir()
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"rocm/sgl-dev:{OLD_AITER_TAG}" in done.stdout  # resolve, then pin
    assert (work / "rocmenv.lock").is_file()
    assert "<function shuffle_scale" in done.stdout
    assert done.stderr.count("rocmenv: shim aiter-shuffle-scale applied") == 1
