"""The sweep after an untrusted run (issue 22, item 3) on real files, nodes and links: what the
host would honour is neutralised, nothing outside the swept tree is touched, however the
container arranged links (the containers themselves: tests/integration/run/test_planted.py)."""

from __future__ import annotations

import os
import shutil
import stat
import struct
from pathlib import Path

import pytest

from rocmenv.container.runspec import BindMount, RunSpec
from rocmenv.run import planted
from rocmenv.run.planted import sweep, sweep_after, writable_sources


class Collect:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, text: str) -> None:
        self.warnings.append(text)


def _plant(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    for name, mode in (("s", 0o4755), ("sub/g", 0o2755), ("sub/deeper/both", 0o6711)):
        (root / name).write_text("#!/bin/sh\n")
        os.chmod(root / name, mode)
    os.mknod(root / "sub" / "b", 0o666 | stat.S_IFBLK, os.makedev(7, 0))
    os.mknod(root / "c", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "plain").write_text("x")
    os.chmod(root / "plain", 0o755)


@pytest.mark.root_only  # mknod: root's (the ordinary-user pass leaves it out)
def test_set_id_bits_are_cleared_and_device_nodes_removed(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    _plant(root)
    done = sweep(str(root))
    assert sorted(done.stripped) == sorted(f"{root}/{n}" for n in ("s", "sub/g", "sub/deeper/both"))
    assert sorted(done.removed) == [f"{root}/c", f"{root}/sub/b"]
    assert stat.S_IMODE((root / "s").stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "sub" / "deeper" / "both").stat().st_mode) == 0o711
    assert stat.S_IMODE((root / "plain").stat().st_mode) == 0o755
    assert not os.path.lexists(root / "c") and not os.path.lexists(root / "sub" / "b")
    assert not done.failed
    assert sweep(str(root)).changed is False  # idempotent


@pytest.mark.root_only  # mknod and a setuid file of the host's: root's (the ordinary-user pass leaves it out)
def test_links_are_never_followed_out_of_the_swept_tree(tmp_path: Path) -> None:
    """A test still running in the same checkout can plant links: the sweep must not strip
    the host's own setuid binaries or remove its device nodes through them."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "sudo").write_text("x")
    os.chmod(outside / "sudo", 0o4755)
    os.mknod(outside / "loop0", 0o660 | stat.S_IFBLK, os.makedev(7, 0))
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "to-dir").symlink_to(outside)
    (root / "to-sudo").symlink_to(outside / "sudo")
    (root / "to-node").symlink_to(outside / "loop0")
    done = sweep(str(root))
    assert not done.changed and not done.failed
    assert stat.S_IMODE((outside / "sudo").stat().st_mode) == 0o4755
    assert stat.S_ISBLK((outside / "loop0").lstat().st_mode)
    assert (root / "to-node").is_symlink()


def test_read_only_sub_mounts_are_skipped(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "hook").write_text("x")
    os.chmod(root / ".git" / "hook", 0o4755)
    done = sweep(str(root), skip={f"{root}/.git"})
    assert not done.changed
    spec = RunSpec(
        image="i",
        untrusted=True,
        mounts=(
            BindMount(source=str(root), target=str(root), origin="checkout"),
            BindMount(source=f"{root}/.git", target=f"{root}/.git", readonly=True, origin="guard"),
            BindMount(source="/data/x", target="/data", readonly=True),
            BindMount(source="/launcher", target="/opt/l", origin="launcher"),
        ),
    )
    assert list(writable_sources(spec)) == [(str(root), (f"{root}/.git",))]


@pytest.mark.root_only  # chown to root: root's (the ordinary-user pass leaves it out)
def test_directories_nested_too_deep_to_walk_are_made_roots_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planted, "MAX_DEPTH", 2)
    root = tmp_path / "checkout"
    deep = root / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    os.chmod(root / "a" / "b" / "c", 0o777)
    (deep / "s").write_text("x")
    os.chmod(deep / "s", 0o4755)
    done = sweep(str(root))
    assert done.fenced == [f"{root}/a/b/c"]
    st = (root / "a" / "b" / "c").stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == 0


@pytest.mark.root_only  # setting security.capability needs CAP_SETFCAP (the ordinary-user pass leaves it out)
def test_file_capabilities_are_removed(tmp_path: Path) -> None:
    """``setcap cap_setuid+ep`` on a copied interpreter would be root for every host user."""
    root = tmp_path / "checkout"
    root.mkdir()
    binary = root / "python"
    shutil.copy("/bin/true", binary)
    # struct vfs_cap_data, revision 2, effective: permitted = CAP_SETUID (bit 7)
    os.setxattr(binary, "security.capability", struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0))
    done = sweep(str(root))
    assert done.uncapped == [str(binary)]
    with pytest.raises(OSError):
        os.getxattr(binary, "security.capability")


@pytest.mark.root_only  # mknod: root's (the ordinary-user pass leaves it out)
def test_sweep_after_says_what_it_did_and_skips_trusted_runs(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    _plant(root)
    mounts = (BindMount(source=str(root), target=str(root), origin="checkout"),)
    reporter = Collect()
    assert sweep_after(RunSpec(image="i", mounts=mounts), reporter) is None  # trusted
    assert stat.S_IMODE((root / "s").stat().st_mode) == 0o4755
    swept = sweep_after(RunSpec(image="i", mounts=mounts, untrusted=True), reporter)
    assert swept is not None and len(swept.stripped) == 3
    (warning,) = reporter.warnings
    assert "removed 2 device node(s)" in warning and "cleared setuid/setgid on 3" in warning
