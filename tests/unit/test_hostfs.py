"""Host writes never follow a link a checkout planted (issue 22, item 1): the primitives of
:mod:`rocmenv.hostfs` on real files, links, FIFOs and hard links."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from rocmenv.hostfs import (
    LinkRefused,
    create_file,
    is_under,
    lexical,
    open_append,
    open_dir,
    write_atomic,
)


@pytest.fixture(name="tree")
def tree_fixture(tmp_path: Path) -> tuple[Path, Path]:
    """(the checkout, a directory outside it that an attacker would like written)."""
    checkout = tmp_path / "checkout"
    outside = tmp_path / "outside"
    checkout.mkdir()
    outside.mkdir()
    return checkout, outside


def test_write_atomic_refuses_a_planted_directory_link_even_a_dangling_one(
    tree: tuple[Path, Path],
) -> None:
    checkout, outside = tree
    (checkout / "logs").symlink_to(outside / "site-packages")  # dangling: not made yet
    with pytest.raises(LinkRefused, match="symbolic link"):
        write_atomic(checkout / "logs" / "evil.pth", "import os\n", within=checkout, parents=True)
    assert not (outside / "site-packages").exists()
    (outside / "site-packages").mkdir()
    with pytest.raises(LinkRefused):
        write_atomic(checkout / "logs" / "evil.pth", "import os\n", within=checkout)
    assert list((outside / "site-packages").iterdir()) == []


def test_write_atomic_replaces_a_planted_file_link_instead_of_writing_through_it(
    tree: tuple[Path, Path],
) -> None:
    checkout, outside = tree
    victim = outside / "victim.txt"
    victim.write_text("precious\n")
    (checkout / "junit.xml").symlink_to(victim)
    write_atomic(checkout / "junit.xml", "<testsuites/>\n", within=checkout)
    assert victim.read_text() == "precious\n"
    assert not (checkout / "junit.xml").is_symlink()
    assert (checkout / "junit.xml").read_text() == "<testsuites/>\n"


def test_a_link_deep_in_the_path_is_refused_and_nothing_is_created_beyond_it(
    tree: tuple[Path, Path],
) -> None:
    checkout, outside = tree
    (checkout / "a").mkdir()
    (checkout / "a" / "b").symlink_to(outside)
    with pytest.raises(LinkRefused, match=r"a/b is a symbolic link"):
        open_dir(checkout / "a" / "b" / "c" / "d", within=checkout, create=True)
    assert list(outside.iterdir()) == []


def test_dot_dot_is_resolved_as_text_never_through_a_link(tree: tuple[Path, Path]) -> None:
    checkout, outside = tree
    (outside / "deep").mkdir()
    (checkout / "jump").symlink_to(outside / "deep")
    # the kernel would take jump/.. to `outside`; rocmenv takes it to the checkout
    write_atomic(checkout / "jump" / ".." / "report.json", "{}\n", within=checkout)
    assert (checkout / "report.json").read_text() == "{}\n"
    assert not (outside / "report.json").exists()


def test_outside_the_checkout_the_hosts_own_links_are_followed(tmp_path: Path) -> None:
    real = tmp_path / "real-cache"
    real.mkdir()
    (tmp_path / "cache").symlink_to(real)  # e.g. /home -> /nfs/home on a cluster
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    write_atomic(tmp_path / "cache" / "rocmenv" / "t.json", "{}", within=checkout, parents=True)
    assert (real / "rocmenv" / "t.json").read_text() == "{}"
    # … but where rocmenv creates a directory, a (dangling) link in its place is refused
    (real / "rocmenv" / "stamps").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LinkRefused):
        write_atomic(tmp_path / "cache" / "rocmenv" / "stamps" / "x.json", "{}",
                     within=checkout, parents=True)  # fmt: skip
    assert not (tmp_path / "elsewhere").exists()


def test_the_checkout_reached_by_its_real_path_is_still_the_checkout(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "repo").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    checkout = tmp_path / "alias" / "repo"  # the working directory as the runner names it
    (real / "repo" / "logs").symlink_to(tmp_path)
    with pytest.raises(LinkRefused):
        write_atomic(real / "repo" / "logs" / "x.log", "x", within=checkout)


def test_write_atomic_keeps_the_old_mode_without_setuid_bits(tmp_path: Path) -> None:
    target = tmp_path / "rocmenv.lock"
    target.write_text("old")
    os.chmod(target, 0o4750)
    write_atomic(target, "new", within=tmp_path)
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    write_atomic(tmp_path / "fresh", "x", within=tmp_path, mode=0o600)
    assert stat.S_IMODE((tmp_path / "fresh").stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_create_file_replaces_a_planted_link_and_never_creates_its_target(
    tree: tuple[Path, Path],
) -> None:
    checkout, outside = tree
    log = checkout / "t.log"
    log.symlink_to(outside / "evil.pth")  # dangling: the attack creates it
    fd = create_file(log, within=checkout)
    with os.fdopen(fd, "w") as fh:
        fh.write("import os; os.system('id')\n")
    assert not (outside / "evil.pth").exists()
    assert not log.is_symlink() and log.read_text().startswith("import os")
    # an old log of the same name is replaced, not appended to
    with os.fdopen(create_file(log, within=checkout), "w") as fh:
        fh.write("second\n")
    assert log.read_text() == "second\n"
    (checkout / "dir.log").mkdir()
    with pytest.raises(LinkRefused, match="is a directory"):
        create_file(checkout / "dir.log", within=checkout)


def test_open_append_refuses_links_fifos_and_second_names(tree: tuple[Path, Path]) -> None:
    checkout, outside = tree
    victim = outside / "victim"
    victim.write_text("precious\n")
    (checkout / "summary.md").symlink_to(victim)
    with pytest.raises(LinkRefused, match="symbolic link"):
        open_append(checkout / "summary.md", within=checkout)
    os.mkfifo(checkout / "fifo.md")
    done = threading.Event()

    def attempt() -> None:
        with pytest.raises(LinkRefused, match="not a directory or regular file"):
            open_append(checkout / "fifo.md", within=checkout)
        done.set()

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert done.is_set(), "open_append blocked on a FIFO"
    (checkout / "mine.md").write_text("")
    os.link(checkout / "mine.md", checkout / "hard.md")
    with pytest.raises(LinkRefused, match="other hard links"):
        open_append(checkout / "hard.md", within=checkout)
    assert victim.read_text() == "precious\n"


def test_open_append_appends_to_a_regular_file(tmp_path: Path) -> None:
    target = tmp_path / "step_summary"
    target.write_text("before\n")
    for line in ("one\n", "two\n"):
        with os.fdopen(open_append(target, within=tmp_path), "a") as fh:
            fh.write(line)
    assert target.read_text() == "before\none\ntwo\n"


def test_lexical_collapses_double_slashes_and_dot_dots() -> None:
    assert lexical(Path("//etc")) == Path("/etc")
    assert lexical(Path("/a/b/../c/./d")) == Path("/a/c/d")
    assert is_under("/a/b", "/a") and not is_under("/ab", "/a")
    with pytest.raises(ValueError, match="not an absolute path"):
        lexical(Path("relative"))
