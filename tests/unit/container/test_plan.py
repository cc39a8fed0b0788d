"""Rendering = running (issue 22, item 5): ``options`` in every format resolves mount sources
exactly as ``run`` does — a checkout link to the Docker socket, ``/`` or ``/etc`` (also
chained), and ``//etc``-style spellings that ``normpath`` keeps are refused by all of them,
on real files. ``run`` refuses before it asks the engine anything."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from rocmenv.cli import main
from rocmenv.context import Context

FORMATS = ["run", "docker", "gha", "compose"]
IMAGE = "docker.io/rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"
ENGINE_SOCKET = "/var/run/docker.sock"


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "fork"
    (root / ".git").mkdir(parents=True)
    (root / "rocmenv.toml").write_text(
        'default-profile = "fork"\n[profiles.fork]\nextends = "cpu"\n'
    )
    return root


def _attacks(root: Path, tmp_path: Path) -> dict[str, str]:
    """Name -> the -v source a workflow would pass (trusted input naming a path the fork
    shaped, or a spelling of a system path)."""
    (root / "to-etc").symlink_to("/etc")
    (root / "to-root").symlink_to("/")
    (root / "hop2").symlink_to(root / "to-etc")  # chained
    (root / "hop1").symlink_to(root / "hop2")
    sock_dir = tmp_path / "sock-dir"
    sock_dir.mkdir()
    (root / "to-socket").symlink_to(ENGINE_SOCKET)
    return {
        "link-to-etc": str(root / "to-etc"),
        "link-to-root": str(root / "to-root"),
        "chained-links": str(root / "hop1"),
        "link-to-engine-socket": str(root / "to-socket"),
        "//etc": "//etc",
        "//var/run": "//var/run",
        "//root": "//root",
    }


def _invoke(root: Path, fmt: str, source: str) -> tuple[int, str]:
    err = io.StringIO()
    ctx = Context(
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(root.parent), "ROCMENV_SHIMS": "0"},
        cwd=root, stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    volume = ["-v", f"{source}:/data"]
    if fmt == "run":
        args = ["run", "--untrusted", "--engine", "docker-cli", "--image", IMAGE, *volume, "--",
                "true"]  # fmt: skip
    else:
        args = ["options", "--format", fmt, "--untrusted", "--image", IMAGE, *volume]
    return main(args, ctx=ctx), err.getvalue()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_refuses_what_run_refuses(tmp_path: Path, fmt: str) -> None:
    if not os.path.exists(ENGINE_SOCKET):
        pytest.fail(f"{ENGINE_SOCKET} is missing: the test environment runs dockerd")
    root = _checkout(tmp_path)
    for name, source in _attacks(root, tmp_path).items():
        code, err = _invoke(root, fmt, source)
        assert code == 2, (name, err)
        assert "untrusted mode" in err and "mounts" in err, (name, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("fmt", ["docker", "gha", "compose"])
def test_every_format_accepts_an_ordinary_source(tmp_path: Path, fmt: str) -> None:
    """The control: the refusals above are about the paths, not the formats (``run`` of an
    ordinary source needs an engine: tests/integration/container/test_untrusted.py)."""
    root = _checkout(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    code, err = _invoke(root, fmt, str(data))
    assert code == 0, err
