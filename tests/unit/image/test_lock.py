"""rocmenv.lock: strict reads, atomic writes, concurrent writers, kill -9 mid-write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocmenv import __version__
from rocmenv.errors import LockError
from rocmenv.image.lock import (
    LOCK_VERSION,
    Lock,
    LockEntry,
    read_lock,
    render_lock,
    update_lock,
    write_lock,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def entry(digest: str = D1, tag: str = "t") -> LockEntry:
    return LockEntry(
        repository="docker.io/rocm/sgl-dev",
        tag=tag,
        digest=digest,
        media_type="application/vnd.oci.image.index.v1+json",
        platform="linux/amd64",
        platform_digest=D2,
        resolved_at="2026-12-02T10:00:00Z",
        registry="127.0.0.1:5000",
        constraints=(("gpu", "mi30x"),),
    )


def test_round_trip_is_sorted_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.lock"
    lock = Lock().with_profile("ci", entry()).with_reference("docker.io/x/y:z", entry(D2))
    write_lock(path, lock, within=tmp_path)
    text = path.read_text()
    data = json.loads(text)
    assert data["lock_version"] == LOCK_VERSION
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    again = read_lock(path)
    assert again.profiles["ci"] == entry()
    assert again.references["docker.io/x/y:z"].digest == D2


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert read_lock(tmp_path / "none.lock") == Lock()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "not a JSON object"),
        ('{"profiles": {}}', "no integer lock_version"),
        ('{"lock_version": 1, "profiles": {"ci": {"repository": "x"}}}', "lacks 'digest'"),
        ('{"lock_version": 1, "bogus": 1}', "unknown top-level field"),
        ('{"lock_version": 0}', "not valid"),
    ],
)
def test_corrupt_lock_is_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "rocmenv.lock"
    path.write_text(content)
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert info.value.exit_code == 2


def test_bad_digest_in_lock_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.lock"
    data = Lock().with_profile("ci", entry()).to_json()
    data["profiles"]["ci"]["digest"] = "sha256:nothex"
    path.write_text(json.dumps(data))
    with pytest.raises(LockError, match="not a valid digest"):
        read_lock(path)


def test_future_lock_version_says_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.lock"
    path.write_text(json.dumps({"lock_version": LOCK_VERSION + 1}))
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.what == (
        f"{path} has lock_version {LOCK_VERSION + 1}; this rocmenv ({__version__}) reads up to "
        f"{LOCK_VERSION}"
    )
    assert info.value.hint == (
        "upgrade rocmenv (it was written by a newer version); do not edit the file by hand"
    )


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rocmenv.image.lock import LockEntry, update_lock
    from tests.support import lock_race
    path, name, digest, other = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    lock_race.install(path.parent / "rendezvous", name, other, timeout=60)
    e = LockEntry(repository="docker.io/a/b", tag=name, digest=digest, media_type="m",
                  platform="linux/amd64", platform_digest=digest, resolved_at="now")
    update_lock(path, lambda lock: lock.with_profile(name, e), within=path.parent)
    """
)


def test_two_concurrent_pins_both_land(tmp_path: Path) -> None:
    """A barrier inside the writer forces the overlap: without the lock one entry is lost."""
    path = tmp_path / "rocmenv.lock"
    (tmp_path / "rendezvous").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, digest, other],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, digest, other in (("a", D1, "b"), ("b", D2, "a"))
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    # the race really happened: one writer waited on the lock while the other held it
    assert {m.name for m in (tmp_path / "rendezvous").iterdir()} >= {"a.writing", "b.writing"}
    assert any((tmp_path / "rendezvous" / f"{n}.blocked").exists() for n in "ab")
    lock = read_lock(path)
    assert set(lock.profiles) == {"a", "b"}


KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from rocmenv.image import lock as L
    path = Path(sys.argv[1])
    big = L.Lock()
    e = L.LockEntry(repository="docker.io/a/b", tag="t", digest="sha256:" + "3" * 64, media_type="m",
                    platform="linux/amd64", platform_digest="sha256:" + "3" * 64, resolved_at="now")
    for i in range(20000):
        big = big.with_reference(f"docker.io/a/b:t{i}", e)
    real_replace = os.replace
    def slow_replace(src, dst, **kw):    # the temp file is complete: die before the rename
        print("ready", flush=True)
        import time; time.sleep(60)
        real_replace(src, dst, **kw)
    os.replace = slow_replace
    L.update_lock(path, lambda lock: big, within=path.parent)
    """
)


def test_kill_minus_9_mid_write_leaves_the_old_lock(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.lock"
    write_lock(path, Lock().with_profile("ci", entry()), within=tmp_path)
    before = path.read_text()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert path.read_text() == before
    assert read_lock(path).profiles["ci"] == entry()
    leftovers = list(tmp_path.glob(".rocmenv.lock.*.tmp"))
    assert leftovers, "the killed writer's temp file should still be there before cleanup"
    update_lock(path, lambda lock: lock.with_profile("other", entry(D2)), within=tmp_path)
    assert not list(tmp_path.glob(".rocmenv.lock.*.tmp"))
    assert set(read_lock(path).profiles) == {"ci", "other"}


HALF_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rocmenv.image import lock as L
    from tests.support import lock_race
    path = Path(sys.argv[1])
    e = L.LockEntry(repository="docker.io/a/b", tag="t", digest="sha256:" + "3" * 64,
                    media_type="m", platform="linux/amd64",
                    platform_digest="sha256:" + "3" * 64, resolved_at="now")
    big = L.Lock()
    for i in range(200):
        big = big.with_reference(f"docker.io/a/b:t{i}", e)
    lock_race.kill_mid_write(threshold=4096)
    L.update_lock(path, lambda lock: big, within=path.parent)
    """
)


def test_kill_minus_9_with_half_the_bytes_written_leaves_the_old_lock(tmp_path: Path) -> None:
    """The writer is killed when half of the new file's bytes are on disk (a hook inside the
    write, not a random delay): an in-place writer would leave half a JSON document."""
    path = tmp_path / "rocmenv.lock"
    write_lock(path, Lock().with_profile("ci", entry()), within=tmp_path)
    before = path.read_text()
    proc = subprocess.Popen(
        [sys.executable, "-c", HALF_WRITER, str(path)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "half"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert path.read_text() == before
    assert read_lock(path).profiles["ci"] == entry()


def test_render_ends_with_newline_and_is_stable() -> None:
    lock = Lock().with_profile("b", entry()).with_profile("a", entry(D2))
    assert render_lock(lock) == render_lock(
        Lock().with_profile("a", entry(D2)).with_profile("b", entry())
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"digest": "md5:" + "a" * 32},
        {"platform_digest": "sha256:short"},
        {"repository": "Not/A/Repository"},
    ],
)
def test_a_lock_that_would_not_read_back_is_never_written(
    tmp_path: Path, bad: dict[str, str]
) -> None:
    """Every entry is validated as the reader would validate it before anything is written:
    the old file stays byte for byte, and no temp file is left."""
    from dataclasses import replace

    path = tmp_path / "rocmenv.lock"
    write_lock(path, Lock().with_profile("ci", entry()), within=tmp_path)
    before = path.read_bytes()
    with pytest.raises(LockError) as info:
        write_lock(path, Lock().with_profile("ci", replace(entry(), **bad)), within=tmp_path)  # type: ignore[arg-type]
    assert info.value.what.startswith(f"{path}: profiles.ci")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rocmenv.lock"]


def _with_entry(**changes: object) -> str:
    data = Lock().with_profile("ci", entry()).to_json()
    data["profiles"]["ci"].update(changes)
    return json.dumps(data)


HINT = "restore it from version control, or delete it and run `rocmenv pin` again"


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("[" * 100_000, "not a lockfile (JSON nested too deeply to read)"),
        ("[]", "not a JSON object"),
        ('{"lock_version": "1"}', "has no integer lock_version"),
        ('{"lock_version": true}', "has no integer lock_version"),
        ('{"lock_version": 1, "x\\u0000": 1}', "x\\u0000 contains a NUL character"),
        ('{"lock_version": 1, "profiles": []}', "profiles is not an object"),
        ('{"lock_version": 1, "references": 3}', "references is not an object"),
        ('{"lock_version": 1, "profiles": {"ci": 3}}', "profiles.ci is not an object"),
        (_with_entry(extra=1), "profiles.ci has an unknown field 'extra'"),
        (_with_entry(digest="md5:" + "a" * 32), f"profiles.ci.digest = 'md5:{'a' * 32}' is not a valid digest"),
        (_with_entry(repository="Rocm/X"), "profiles.ci.repository: "),
        (_with_entry(repository="rocm/sgl-dev"),
         "profiles.ci.repository = 'rocm/sgl-dev' is not a canonical repository name "
         "('docker.io/rocm/sgl-dev')"),
        (_with_entry(repository="docker.io/rocm/sgl-dev:t"), "profiles.ci.repository"),
        (_with_entry(tag=3), "profiles.ci.tag is not a string"),
        (_with_entry(tag="-bad"), "profiles.ci.tag: "),
        (_with_entry(registry=5), "profiles.ci.registry is not a string"),
        (_with_entry(constraints={"gpu": 1}), "profiles.ci.constraints must map strings to strings"),
        (_with_entry(packages=["x"]), "profiles.ci.packages must map strings to strings"),
    ],
)  # fmt: skip
def test_each_refusal_names_the_file_the_field_and_what_to_do(
    tmp_path: Path, content: str, what: str
) -> None:
    path = tmp_path / "rocmenv.lock"
    path.write_text(content)
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.what.startswith(f"{path}: {what}")
    assert info.value.hint == HINT


def test_a_lock_at_the_size_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    from rocmenv.settings.files import MAX_FILE_BYTES

    path = tmp_path / "rocmenv.lock"
    text = render_lock(Lock().with_profile("ci", entry()))
    path.write_text(text[:-2] + " " * (MAX_FILE_BYTES - len(text)) + "}\n")
    assert path.stat().st_size == MAX_FILE_BYTES
    assert read_lock(path).profiles["ci"] == entry()
    path.write_text(text[:-2] + " " * (MAX_FILE_BYTES - len(text) + 1) + "}\n")
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.what == f"{path}: larger than 16 MiB, so not a lockfile"


def test_not_utf8_and_unreadable_locks_say_so(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.lock"
    path.write_bytes(b'{"lock_version": 1, "x": "\xff"}')
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.what == f"{path}: not UTF-8 text (byte 26), so not a lockfile"
    path.unlink()
    path.mkdir()
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.what == f"cannot read {path}: Is a directory"


def test_packages_and_constraints_round_trip(tmp_path: Path) -> None:
    from dataclasses import replace

    path = tmp_path / "rocmenv.lock"
    full = replace(entry(), packages=(("amd-aiter", "0.1.9"), ("torch", "2.9")))
    write_lock(path, Lock().with_profile("ci", full), within=tmp_path)
    data = json.loads(path.read_text())["profiles"]["ci"]
    assert data["packages"] == {"amd-aiter": "0.1.9", "torch": "2.9"}
    assert data["constraints"] == {"gpu": "mi30x"}
    assert read_lock(path).profiles["ci"] == full
    bare = replace(entry(), constraints=(), registry=None)
    write_lock(path, Lock().with_profile("ci", bare), within=tmp_path)
    assert set(json.loads(path.read_text())["profiles"]["ci"]) == {
        "repository", "tag", "digest", "media_type", "platform", "platform_digest", "resolved_at",
    }  # fmt: skip


def test_stale_temp_files_of_dead_writers_are_cleaned_and_live_ones_kept(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.lock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale = [tmp_path / f".rocmenv.lock.{dead}.abc.tmp", tmp_path / f".rocmenv.lock.{dead}.x.y.tmp"]
    live = tmp_path / f".rocmenv.lock.{os.getpid()}.def.tmp"
    odd = tmp_path / ".rocmenv.lock.0x.tmp"  # sorts first: skipped, the scan goes on
    later = tmp_path / f".rocmenv.lock.{dead}z.tmp"  # not a pid: left alone, the scan goes on
    for p in (*stale, live, odd, later):
        p.write_text("x")
    write_lock(path, Lock().with_profile("ci", entry()), within=tmp_path)
    assert not any(p.exists() for p in stale)
    assert live.exists() and odd.exists() and later.exists()


def test_a_writer_waits_only_as_long_as_it_is_told(tmp_path: Path) -> None:
    import threading

    from rocmenv.image.lock import exclusive

    path = tmp_path / "rocmenv.lock"
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with exclusive(path, within=tmp_path):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(30)
        with pytest.raises(
            LockError, match=r"being written by another rocmenv process \(waited 0 s\)"
        ):
            update_lock(path, lambda lock: lock, within=tmp_path, timeout=0.2)
    finally:
        release.set()
        thread.join()
    assert (
        update_lock(path, lambda lock: lock.with_profile("ci", entry()), within=tmp_path).profiles[
            "ci"
        ]
        == entry()
    )
