"""The sweep after an untrusted run (rocmenv.run.planted), on the paths the first tests left
open (issue 34): a policy that lets the container keep SETFCAP, a capability set on a file
that is not (yet) executable, and a run that ends in an engine error after the command ran
(the sweep is the run's cleanup, whatever ended it). Real files with a real
``security.capability`` attribute (setting one needs CAP_SETFCAP: root-only, see
``root_only`` below); the run against the in-memory engine of tests/support/fake_engine.py."""

from __future__ import annotations

import io
import os
import shutil
import stat
import struct
from pathlib import Path
from typing import Any

import pytest

from rocmenv.container.runspec import BindMount, Overrides, RunSpec
from rocmenv.context import Context
from rocmenv.engine.protocol import ImageInfo
from rocmenv.errors import EngineError
from rocmenv.run.execute import RunRequest, execute
from rocmenv.run.planted import CAPABILITY_XATTR, sweep_after
from rocmenv.settings.resolve import Flags
from tests.support.fake_engine import FakeAttachment, FakeEngine

# struct vfs_cap_data, revision 2, effective: permitted = CAP_SETUID (bit 7): cap_setuid+ep
CAP_SETUID_EP = struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)
IMAGE = "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"

# Only root (CAP_SETFCAP) can set security.capability: as an ordinary user these are not run
# (scripts/test.sh's unprivileged pass deselects root_only).
root_only = pytest.mark.root_only


class Collect:
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.notes: list[str] = []

    def warning(self, text: str) -> None:
        self.warnings.append(text)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def pull(self, settings: Any, engine: Any, image: str) -> None:
        raise AssertionError(f"these runs use an image the engine has, not {image}")


def capped(path: Path, mode: int = 0o755) -> Path:
    shutil.copy("/bin/true", path)
    os.chmod(path, mode)
    os.setxattr(path, CAPABILITY_XATTR, CAP_SETUID_EP)
    return path


def has_capability(path: Path) -> bool:
    try:
        os.getxattr(path, CAPABILITY_XATTR)
    except OSError:
        return False
    return True


def untrusted(root: Path, cap_drop: tuple[str, ...]) -> RunSpec:
    mounts = (BindMount(source=str(root), target=str(root), origin="checkout"),)
    return RunSpec(image="i", mounts=mounts, untrusted=True, cap_drop=cap_drop)


@root_only
@pytest.mark.parametrize(
    "cap_drop",
    [(), ("MKNOD", "FSETID"), ("SETPCAP",), ("SETFCAPX",)],
    ids=["nothing-dropped", "others-dropped", "a-prefix-of-it", "a-longer-name"],
)
def test_a_policy_that_allows_setfcap_gets_its_file_capabilities_removed(
    tmp_path: Path, cap_drop: tuple[str, ...]
) -> None:
    """``cap-add = ["SETFCAP"]`` in a policy keeps SETFCAP out of the drop list: the container
    could ``setcap cap_setuid+ep`` a copied interpreter, which would be root for every host
    user. The sweep after the run must look for capabilities and remove them."""
    root = tmp_path / "checkout"
    (root / "sub").mkdir(parents=True)
    binary = capped(root / "sub" / "python")
    reporter = Collect()
    swept = sweep_after(untrusted(root, cap_drop), reporter)
    assert swept is not None and swept.uncapped == [str(binary)]
    assert not has_capability(binary)
    assert reporter.warnings  # the run says what it neutralised


@root_only
@pytest.mark.parametrize("spelling", ["SETFCAP", "CAP_SETFCAP", "setfcap", "cap_setfcap"])
def test_with_setfcap_dropped_no_capability_is_looked_for(tmp_path: Path, spelling: str) -> None:
    """Without SETFCAP nothing in the container could set one (the default policy): the sweep
    spares the ``getxattr`` per file, in any spelling of the dropped capability."""
    root = tmp_path / "checkout"
    root.mkdir()
    binary = capped(root / "python")
    swept = sweep_after(untrusted(root, ("MKNOD", spelling)), Collect())
    assert swept is not None and swept.uncapped == []
    assert has_capability(binary)  # not the container's: nothing here could have set it


@root_only
@pytest.mark.parametrize("mode", [0o644, 0o600, 0o4644])
def test_a_capability_on_a_file_that_is_not_executable_is_removed_too(
    tmp_path: Path, mode: int
) -> None:
    """``chmod`` keeps ``security.capability``: a capped file the container left as 0644 and
    gave to a host user becomes ``cap_setuid+ep`` the moment that user makes it executable."""
    root = tmp_path / "checkout"
    root.mkdir()
    binary = capped(root / "later", mode)
    os.chown(binary, 65534, 65534)
    os.setxattr(binary, CAPABILITY_XATTR, CAP_SETUID_EP)  # chown cleared it: set again
    swept = sweep_after(untrusted(root, ()), Collect())
    assert swept is not None and swept.uncapped == [str(binary)]
    assert not has_capability(binary)
    os.chmod(binary, 0o755)  # what the host user may do next
    assert not has_capability(binary)


# -- the sweep is the run's cleanup, however the run ended ---------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        'default-profile = "ci"\n[profiles.ci]\nextends = "cpu"\nimage = "rocm/sgl-dev"\n'
        'tag = "v0.5.8-rocm700-mi30x-20260215"\n'
    )
    return tmp_path


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine(images={IMAGE: ImageInfo(id="sha256:" + "1" * 64)})
    monkeypatch.setattr("rocmenv.run.execute.make_engine", lambda *_a, **_k: fake)
    return fake


def planted_shell(project: Path) -> Path:
    """What the container left in the checkout: a setuid-root shell (no root needed to make
    one for the test: the sweep judges the mode bits, whoever owns the file)."""
    shell = project / "s"
    shell.write_text("#!/bin/sh\n")
    os.chmod(shell, 0o4755)
    return shell


def run_untrusted(project: Path) -> int:
    ctx = Context(
        env={"HOME": str(project), "XDG_CACHE_HOME": str(project / ".cache")},
        cwd=project, stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    request = RunRequest(flags=Flags(untrusted=True, shims=False),
                         overrides=Overrides(command=("true",)))  # fmt: skip
    return execute(ctx, request, Collect())


def test_an_untrusted_run_that_ends_normally_is_swept(project: Path, engine: FakeEngine) -> None:
    shell = planted_shell(project)
    assert run_untrusted(project) == 0
    (spec,) = engine.created.values()
    assert any(m.source == str(project) and not m.readonly for m in spec.mounts)  # writable
    assert stat.S_IMODE(shell.stat().st_mode) == 0o755


@pytest.mark.parametrize("where", ["wait", "attach"])
def test_an_untrusted_run_that_ends_in_an_engine_error_after_the_command_ran_is_still_swept(
    project: Path, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The command ran (and could have planted anything); then the engine failed — the wait
    for its exit, or the attach stream. The error is the run's result, and the checkout is
    swept all the same, the container removed."""
    shell = planted_shell(project)
    ran: list[str] = []

    def broken(self: FakeAttachment, *_args: object) -> None:
        ran.append(self.box.state)
        raise EngineError(f"the engine's {where} connection was reset")

    if where == "wait":
        monkeypatch.setattr(FakeAttachment, "exit_code", lambda self: None)
        monkeypatch.setattr(FakeEngine, "wait", lambda self, cid, timeout=None: broken(
            FakeAttachment(self, self.containers[cid], 1, 2)))  # fmt: skip
    else:
        monkeypatch.setattr(FakeAttachment, "join", broken)
    with pytest.raises(EngineError):
        run_untrusted(project)
    assert ran and ran[0] in ("running", "exited")  # the command had started
    assert stat.S_IMODE(shell.stat().st_mode) == 0o755  # swept
    assert engine.alive == set()  # and removed


def test_a_trusted_run_that_ends_in_an_engine_error_sweeps_nothing(
    project: Path, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = planted_shell(project)

    def broken(self: FakeAttachment, *_args: object) -> None:
        raise EngineError("the engine's attach connection was reset")

    monkeypatch.setattr(FakeAttachment, "join", broken)
    ctx = Context(
        env={"HOME": str(project), "XDG_CACHE_HOME": str(project / ".cache")},
        cwd=project, stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    with pytest.raises(EngineError):
        execute(ctx, RunRequest(flags=Flags(shims=False)), Collect())
    assert stat.S_IMODE(shell.stat().st_mode) == 0o4755  # a trusted checkout is the user's


# -- what the sweep after a run says, and what it skips ------------------------------------------


def setuid_files(root: Path, names: list[str]) -> list[str]:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        os.chmod(path, 0o4755)  # any owner may set it on its own file
    return [str(root / n) for n in names]


def test_the_warning_lists_five_paths_and_counts_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    paths = setuid_files(root, [f"s{i}" for i in range(7)])
    reporter = Collect()
    swept = sweep_after(untrusted(root, ("SETFCAP",)), reporter)
    assert swept is not None and sorted(swept.stripped) == sorted(paths)
    (warning,) = reporter.warnings
    assert ", ".join(swept.stripped[:5]) in warning and swept.stripped[5] not in warning
    assert "(and 2 more)" in warning and "7" in warning
    few = tmp_path / "few"
    setuid_files(few, [f"s{i}" for i in range(5)])
    reporter = Collect()
    swept = sweep_after(untrusted(few, ("SETFCAP",)), reporter)
    assert swept is not None and all(p in reporter.warnings[0] for p in swept.stripped)
    assert "more)" not in reporter.warnings[0]


@root_only
def test_a_capability_alone_is_removed_without_touching_the_mode(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    binary = capped(root / "python", 0o755)
    swept = sweep_after(untrusted(root, ()), Collect())
    assert swept is not None and swept.stripped == [] and swept.uncapped == [str(binary)]
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755


def test_what_could_not_be_swept_is_warned_about_with_its_path(tmp_path: Path) -> None:
    missing = [tmp_path / f"gone{i}" for i in range(7)]
    mounts = tuple(BindMount(source=str(p), target=f"/m{i}", origin="profile")
                   for i, p in enumerate(missing))  # fmt: skip
    reporter = Collect()
    swept = sweep_after(RunSpec(image="i", mounts=mounts, untrusted=True), reporter)
    assert swept is not None and len(swept.failed) == 7
    assert all(f.startswith(f"{p}: ") for f, p in zip(swept.failed, missing, strict=True))
    (warning,) = reporter.warnings  # nothing was changed: only the failure is told
    assert "; ".join(swept.failed[:5]) in warning and swept.failed[5] not in warning
    assert "(and 2 more)" in warning


def test_read_only_sub_mounts_are_skipped_by_the_sweep_after_a_run(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    hooks = setuid_files(root, [".git/hooks/post-checkout"])
    others = setuid_files(root, [f"d{i}/s" for i in range(12)])  # walked before and after it
    spec = RunSpec(image="i", untrusted=True, cap_drop=("SETFCAP",), mounts=(
        BindMount(source=str(root), target="/w", origin="checkout"),
        BindMount(source=f"{root}/.git", target="/w/.git", readonly=True, origin="guard"),
    ))  # fmt: skip
    swept = sweep_after(spec, Collect())
    assert swept is not None and sorted(swept.stripped) == sorted(others)
    assert stat.S_IMODE(Path(hooks[0]).stat().st_mode) == 0o4755  # read-only to the container


def test_a_root_given_with_a_trailing_slash_reports_clean_paths(tmp_path: Path) -> None:
    from rocmenv.run.planted import sweep

    root = tmp_path / "checkout"
    (path,) = setuid_files(root, ["sub/s"])
    assert sweep(f"{root}/").stripped == [path]


def test_a_root_that_is_not_a_directory_is_a_failure_naming_it(tmp_path: Path) -> None:
    from rocmenv.run.planted import sweep

    (path,) = setuid_files(tmp_path, ["file"])
    done = sweep(path)
    assert [f.partition(": ")[0] for f in done.failed] == [path]
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o4755  # a file mount is not walked


@root_only
def test_a_directory_too_deep_to_walk_is_made_root_s_alone_in_the_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmenv.run import planted

    monkeypatch.setattr(planted, "MAX_DEPTH", 1)
    root = tmp_path / "checkout"
    (root / "a" / "b" / "c").mkdir(parents=True)
    os.chown(root / "a" / "b", 1000, 1000)
    reporter = Collect()
    swept = sweep_after(untrusted(root, ("SETFCAP",)), reporter)
    assert swept is not None and swept.fenced == [f"{root}/a/b"]
    st = (root / "a" / "b").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700)
    assert f"{root}/a/b" in reporter.warnings[0]


# -- the counts in what is told, and failures that only a race or a refusal produces ------------
# (a directory swapped for a link between the listing and the open, a file the host refuses to
# change): the refusal is injected into the one call, the walk itself is real


def test_five_failures_are_all_shown_and_six_are_five_and_a_count(tmp_path: Path) -> None:
    for n, more in ((5, ""), (6, " (and 1 more)")):
        missing = [tmp_path / f"gone{n}-{i}" for i in range(n)]
        mounts = tuple(BindMount(source=str(p), target=f"/m{i}", origin="profile")
                       for i, p in enumerate(missing))  # fmt: skip
        reporter = Collect()
        swept = sweep_after(RunSpec(image="i", mounts=mounts, untrusted=True), reporter)
        assert swept is not None
        assert f"{'; '.join(swept.failed[:5])}{more} — " in reporter.warnings[0]


def test_six_changes_are_five_shown_and_a_count(tmp_path: Path) -> None:
    for n, more in ((5, ""), (6, " (and 1 more)")):
        root = tmp_path / f"c{n}"
        setuid_files(root, [f"s{i}" for i in range(n)])
        reporter = Collect()
        swept = sweep_after(untrusted(root, ("SETFCAP",)), reporter)
        assert swept is not None
        assert reporter.warnings[0].endswith(f"): {', '.join(swept.stripped[:5])}{more}")


def _refusing(monkeypatch: pytest.MonkeyPatch, name: str, what: str, error: OSError) -> None:

    real = getattr(os, what)

    def refuse(target: Any, *args: Any, **kwargs: Any) -> Any:
        shown = target if isinstance(target, str) else ""
        if shown == name or (isinstance(target, int) and name == "*fd*"):
            raise error
        return real(target, *args, **kwargs)

    monkeypatch.setattr(f"rocmenv.run.planted.os.{what}", refuse)


@pytest.mark.parametrize(
    ("error", "reported"),
    [(OSError(40, "Too many levels of symbolic links"), True),
     (FileNotFoundError(2, "No such file or directory"), False)],
)  # fmt: skip
def test_a_directory_that_cannot_be_opened_is_reported_and_the_walk_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, reported: bool
) -> None:
    from rocmenv.run.planted import sweep

    root = tmp_path / "checkout"
    setuid_files(root, ["racy/s"])
    others = setuid_files(root, [f"d{i}/s" for i in range(12)])
    _refusing(monkeypatch, "racy", "open", error)
    done = sweep(str(root))
    assert sorted(done.stripped) == sorted(others)  # every other directory still walked
    assert done.failed == ([f"{root}/racy: {error.strerror}"] if reported else [])


def test_a_file_the_sweep_cannot_open_is_reported_with_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmenv.run.planted import sweep

    root = tmp_path / "checkout"
    setuid_files(root, ["locked"])
    others = setuid_files(root, [f"s{i}" for i in range(5)])
    _refusing(monkeypatch, "locked", "open", PermissionError(13, "Permission denied"))
    done = sweep(str(root))
    assert done.failed == [f"{root}/locked: Permission denied"]
    assert sorted(done.stripped) == sorted(others)


def test_a_file_whose_mode_cannot_be_changed_is_reported_with_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmenv.run.planted import sweep

    root = tmp_path / "checkout"
    (path,) = setuid_files(root, ["s"])
    _refusing(monkeypatch, "*fd*", "fchmod", PermissionError(1, "Operation not permitted"))
    done = sweep(str(root))
    assert done.failed == [f"{path}: Operation not permitted"] and done.stripped == []


def test_a_subdirectory_listing_that_fails_is_reported_and_its_siblings_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmenv.run import planted

    root = tmp_path / "checkout"
    setuid_files(root, ["bad/s"])
    others = setuid_files(root, [f"d{i}/s" for i in range(4)])
    real = os.scandir
    bad_fd: list[int] = []
    real_open = os.open

    def opening(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(name, flags, *args, **kwargs)
        if name == "bad":
            bad_fd.append(fd)
        return fd

    def listing(target: Any) -> Any:
        if bad_fd and target == bad_fd[0]:
            bad_fd.clear()  # the descriptor's number is reused once it is closed
            raise PermissionError(13, "Permission denied")
        return real(target)

    monkeypatch.setattr("rocmenv.run.planted.os.open", opening)
    monkeypatch.setattr("rocmenv.run.planted.os.scandir", listing)
    done = planted.sweep(str(root))
    assert done.failed == [f"{root}/bad: Permission denied"]
    assert sorted(done.stripped) == sorted(others)


@root_only
def test_a_device_node_that_cannot_be_removed_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmenv.run.planted import sweep

    root = tmp_path / "checkout"
    root.mkdir()
    os.mknod(root / "b", 0o666 | stat.S_IFBLK, os.makedev(7, 0))
    _refusing(monkeypatch, "b", "unlink", PermissionError(1, "Operation not permitted"))
    done = sweep(str(root))
    assert done.failed == [f"{root}/b (device node): Operation not permitted"]


@root_only
def test_a_too_deep_directory_that_cannot_be_fenced_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmenv.run import planted

    monkeypatch.setattr(planted, "MAX_DEPTH", 0)
    root = tmp_path / "checkout"
    (root / "a").mkdir(parents=True)
    _refusing(monkeypatch, "*fd*", "fchown", PermissionError(1, "Operation not permitted"))
    done = planted.sweep(str(root))
    assert done.fenced == [] and [f.partition(" (")[0] for f in done.failed] == [f"{root}/a"]


def test_many_skipped_directories_never_end_the_walk_early(tmp_path: Path) -> None:
    from rocmenv.run.planted import sweep

    root = tmp_path / "checkout"
    skipped = setuid_files(root, [f"ro{i}/s" for i in range(6)])
    walked = setuid_files(root, [f"rw{i}/s" for i in range(6)])
    done = sweep(str(root), skip={f"{root}/ro{i}" for i in range(6)})
    assert sorted(done.stripped) == sorted(walked)
    assert all(stat.S_IMODE(Path(p).stat().st_mode) == 0o4755 for p in skipped)
