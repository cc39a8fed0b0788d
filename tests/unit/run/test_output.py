"""``--output``: what leaves a container (rocmenv/run/output.py), from tar streams a hostile
container could make the engine produce; the real engines in
tests/integration/run/test_checkout_view.py."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from rocmenv.container.runspec import RunSpec
from rocmenv.errors import UsageError
from rocmenv.run.output import MAX_ENTRIES, check_destination, copy_out, summary
from tests.support.fake_engine import FakeEngine

SOURCE = "/rocmenv-output"


def archive(*members: tuple[str, bytes | str | None, int] | tarfile.TarInfo) -> bytes:
    """A tar of (name, content: bytes = a file, str = a link's target, ``hard:`` a hard
    link's, None = a directory, mode), or of prepared entries (nodes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
                continue
            name, content, mode = member
            info = tarfile.TarInfo(name)
            info.mode = mode
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, str):
                info.type = tarfile.SYMTYPE if not content.startswith("hard:") else tarfile.LNKTYPE
                info.linkname = content.removeprefix("hard:")
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def node(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info


def engine_with(data: bytes) -> tuple[FakeEngine, str]:
    engine = FakeEngine()
    cid = "c" * 64
    engine._add(cid, None, RunSpec(image="x"))
    engine.archives[SOURCE] = data
    return engine, cid


def copy(data: bytes, dest: Path, **kw: object):
    engine, cid = engine_with(data)
    return copy_out(engine, cid, SOURCE, dest, checkout=kw.pop("checkout", None), **kw)  # type: ignore[arg-type]


def modes(dest: Path) -> dict[str, int]:
    return {str(p.relative_to(dest)): stat.S_IMODE(p.lstat().st_mode) | (p.is_dir() << 16)
            for p in dest.rglob("*")}  # fmt: skip


def test_regular_files_leave_with_plain_modes_only(tmp_path: Path) -> None:
    data = archive(("./", None, 0o755), ("./d", None, 0o777), ("./d/a", b"a", 0o6777),
                   ("./run", b"#!", 0o4711), ("./plain", b"p", 0o600), ("./w", b"w", 0o666))  # fmt: skip
    done = copy(data, tmp_path / "out")
    assert modes(tmp_path / "out") == {"d": 0o755 | 1 << 16, "d/a": 0o755, "run": 0o755,
                                       "plain": 0o644, "w": 0o644}  # fmt: skip
    assert (tmp_path / "out" / "d" / "a").read_bytes() == b"a"
    assert (done.files, done.size, done.skipped, done.stopped) == (4, 5, [], None)


def test_links_nodes_and_fifos_are_left_out_and_said(tmp_path: Path) -> None:
    data = archive(("link", "/etc/passwd", 0o777), ("hard", "hard:link", 0o644),
                   node("blk", tarfile.BLKTYPE), node("chr", tarfile.CHRTYPE),
                   node("fifo", tarfile.FIFOTYPE))  # fmt: skip
    done = copy(data, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []
    assert sorted(done.skipped) == [
        "blk (a device node or FIFO)", "chr (a device node or FIFO)",
        "fifo (a device node or FIFO)", "hard (a hard link)", "link (a symbolic link)",
    ]  # fmt: skip


@pytest.mark.parametrize("name", [".git/config", "sub/.git", "x/.GIT/hooks/pre-commit"])
def test_nothing_named_git_is_written(tmp_path: Path, name: str) -> None:
    done = copy(archive((name, b"[core]\n\tfsmonitor = x\n", 0o644)), tmp_path / "out")
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))
    assert done.skipped == [f"{name} (named .git)"]


@pytest.mark.parametrize("name", ["../escape", "a/../../escape", "new\nline", "esc\x1b[2J"])
def test_names_that_climb_or_hold_control_characters_are_left_out(
    tmp_path: Path, name: str
) -> None:
    done = copy(archive((name, b"x", 0o644)), tmp_path / "box" / "out")
    assert list((tmp_path / "box").rglob("*")) == [tmp_path / "box" / "out"]
    assert done.files == 0 and len(done.skipped) == 1
    assert "\n" not in done.skipped[0] and "\x1b" not in done.skipped[0]


def test_an_existing_link_at_a_name_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report").symlink_to(victim)
    (out / "dir").symlink_to(tmp_path)
    done = copy(archive(("report", b"new", 0o644), ("dir/x", b"x", 0o644)), out)
    assert victim.read_text() == "precious\n" and not (tmp_path / "x").exists()
    assert (out / "report").read_bytes() == b"new" and not (out / "report").is_symlink()
    assert done.files == 1 and done.skipped[0].startswith("dir/x")


def test_the_size_cap_stops_the_copy_and_says_so(tmp_path: Path) -> None:
    data = archive(("a", b"1" * 600, 0o644), ("b", b"2" * 600, 0o644))
    done = copy(data, tmp_path / "out", limit=1000)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a"]
    assert done.stopped == "the size cap (1000 bytes in all)"
    _note, warnings = summary(done, tmp_path / "out")
    assert "incomplete" in warnings[-1]


def test_the_entry_cap_stops_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rocmenv.run.output.MAX_ENTRIES", 3)
    data = archive(*((f"f{i}", b"", 0o644) for i in range(10)))
    done = copy(data, tmp_path / "out")
    assert done.files == 3 and done.stopped == "3 entries"
    assert MAX_ENTRIES == 100_000


def test_an_interrupt_stops_the_copy(tmp_path: Path) -> None:
    asked = iter([False, True])
    done = copy(archive(("a", b"a", 0o644), ("b", b"b", 0o644)), tmp_path / "out",
                stopped=lambda: next(asked))  # fmt: skip
    assert done.files == 1 and done.stopped == "an interrupt"


def test_a_destination_inside_the_checkout_is_walked_without_links(tmp_path: Path) -> None:
    checkout = tmp_path / "repo"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    checkout.mkdir()
    (checkout / "results").symlink_to(elsewhere)  # the fork committed it
    with pytest.raises(OSError, match="symbolic link"):
        copy(archive(("a", b"a", 0o644)), checkout / "results" / "run1", checkout=checkout)
    assert list(elsewhere.iterdir()) == []
    copy(archive(("a", b"a", 0o644)), checkout / "out", checkout=checkout)
    assert (checkout / "out" / "a").read_bytes() == b"a"


def test_a_destination_in_the_checkouts_git_or_relative_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\.git"):
        check_destination(tmp_path / "repo" / ".git" / "x", tmp_path / "repo")
    with pytest.raises(UsageError, match="absolute"):
        check_destination(Path("out"), tmp_path)
    check_destination(tmp_path / "repo" / "results", tmp_path / "repo")


def test_nothing_at_the_path_copies_nothing(tmp_path: Path) -> None:
    done = copy(b"", tmp_path / "out")
    assert (done.files, done.skipped, done.stopped) == (0, [], None)
    assert os.path.isdir(tmp_path / "out")


def test_a_broken_archive_stops_the_copy_and_says_so(tmp_path: Path) -> None:
    data = archive(("a", b"a" * 2000, 0o644))
    done = copy(data[:1200], tmp_path / "out")
    assert done.stopped is not None and "does not read" in done.stopped
    assert list((tmp_path / "out").iterdir()) == []  # no half file
