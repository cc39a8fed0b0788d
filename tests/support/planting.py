"""Issue 31's attack on the host through the checkout, shared by the ``run`` and ``suite
run`` tests: a fork whose repository has a submodule gitlink ``sub``; its tests write,
chmod, mknod, symlink and plant ``.git`` files — ``.git/config`` with ``core.fsmonitor``,
a hook, and ``sub/.git`` (``gitdir:`` to a directory the container made, whose config has
``core.fsmonitor``), chowned to the checkout's owner so ``safe.directory`` passes. The
runner's next ``git status`` on the host then runs the planted command — unless the
checkout the host sees is the one it checked out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.hostile import write_checkout

#: The tests' attack: ``@MARKER@`` is the file the planted commands would create.
PLANT = r"""
set -u
echo changed >> a.txt
echo new > new.txt
chmod 4755 a.txt
chmod 777 .
mknod dev c 1 3 2>/dev/null && chmod 666 dev && echo node=made
ln -s /etc/passwd link
rm -f .gitmodules
mkdir -p .git/hooks && printf '#!/bin/sh\ntouch @MARKER@.hook\n' > .git/hooks/pre-commit
chmod 755 .git/hooks/pre-commit
printf '[core]\n\tfsmonitor = "touch @MARKER@.top; false"\n' >> .git/config
mkdir -p evil/objects evil/refs/heads sub
echo 'ref: refs/heads/main' > evil/HEAD
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "touch @MARKER@.sub; false"\n' > evil/config
printf 'gitdir: ../evil\n' > sub/.git
chown -R "$(stat -c %u:%g .)" evil sub .git/config
echo planted=yes
"""


def fork_repo(base: Path, token: str, profile: dict[str, object], *, tail: str = "") -> Path:
    """A real git checkout at ``base/fork`` (committed ``a.txt``, ``.gitmodules`` and the
    gitlink ``sub``) whose ``rocmenv.toml`` is the fork's ``profile`` (then ``tail``: a
    suite, say; with one, no lockfile: the profile's image is its own)."""
    root = write_checkout(base / "fork", {"labels": {"org.rocmenv.test": token}, **profile})
    if tail:
        (root / "rocmenv.lock").unlink()
        (root / "rocmenv.toml").write_text((root / "rocmenv.toml").read_text() + tail)
    git(root, "init", "-q")
    (root / "a.txt").write_text("hi\n")
    (root / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n')
    git(root, "add", "a.txt", ".gitmodules", "rocmenv.toml", *(() if tail else ("rocmenv.lock",)))
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},sub")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "fork")
    (root / "sub").mkdir()
    return root


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The host's git in ``root``, as the runner's next step would run it."""
    return subprocess.run(
        ["git", *args], cwd=root, env=_git_env(root), capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip


def planted_commands_ran(root: Path, marker: Path) -> list[str]:
    """Run the host's ``git status`` (it refreshes the index, asks fsmonitor, looks into
    submodules) and ``git diff --quiet``: the markers any planted command made."""
    for args in (["status"], ["diff", "--quiet"]):
        subprocess.run(["git", *args], cwd=root, env=_git_env(root), capture_output=True,
                       timeout=60, check=False)  # fmt: skip
    return sorted(p.name for p in marker.parent.glob(marker.name + "*"))


def _git_env(root: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root.parent),
            "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip
