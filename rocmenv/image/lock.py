"""``rocmenv.lock``: pinned digests, per profile and per bare reference.

Format (JSON, sorted keys, two-space indent)::

    {
      "lock_version": 1,
      "generator": "rocmenv X.Y.Z",        # the version that wrote it
      "profiles": {
        "ci": {
          "repository": "docker.io/rocm/sgl-dev",
          "tag": "v0.5.8-rocm700-mi30x-20260215",
          "digest": "sha256:…",              # what the tag points at (index digest if an index)
          "media_type": "application/vnd.oci.image.index.v1+json",
          "platform": "linux/amd64",
          "platform_digest": "sha256:…",     # the linux/amd64 image manifest
          "registry": "127.0.0.1:5000",      # the host that answered (a mirror or the registry)
          "resolved_at": "2026-12-02T10:00:00Z",
          "constraints": {"gpu": "mi30x", …}, # when the tag was resolved from constraints
          "packages": {"amd-aiter": "0.1.9.post1", …}   # optional, found inside the image
        }
      },
      "references": { "docker.io/rocm/sgl-dev:miles-rocm720-mi35x": { … } }
    }

Writes are atomic (temp file in the same directory, fsync, ``os.replace``) and serialised by
an advisory lock on its directory, so a ``kill -9`` mid-write leaves the old file intact and
two concurrent ``pin`` runs both land. Reads are strict: a corrupt file or one from a newer
``lock_version`` is an error that says what to do.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from rocmenv import __version__
from rocmenv.errors import InvalidReference, LockError
from rocmenv.grammar.reference import parse_repository, validate_digest, validate_tag
from rocmenv.hostfs import write_atomic

LOCK_VERSION = 1
ENTRY_REQUIRED = (
    "repository",
    "digest",
    "media_type",
    "platform",
    "platform_digest",
    "resolved_at",
)
ENTRY_OPTIONAL = ("tag", "registry", "constraints", "packages")


class LockEntryJSON(TypedDict, total=False):
    repository: str
    tag: str | None
    digest: str
    media_type: str
    platform: str
    platform_digest: str
    registry: str
    resolved_at: str
    constraints: dict[str, str]
    packages: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class LockEntry:
    repository: str
    digest: str
    media_type: str
    platform: str
    platform_digest: str
    resolved_at: str
    tag: str | None = None
    registry: str | None = None
    constraints: tuple[tuple[str, str], ...] = ()
    packages: tuple[tuple[str, str], ...] = ()

    @property
    def pinned(self) -> str:
        """``repository@digest``: what cannot move."""
        return f"{self.repository}@{self.digest}"

    def to_json(self) -> LockEntryJSON:
        data: LockEntryJSON = {
            "repository": self.repository,
            "tag": self.tag,
            "digest": self.digest,
            "media_type": self.media_type,
            "platform": self.platform,
            "platform_digest": self.platform_digest,
            "resolved_at": self.resolved_at,
        }
        if self.registry:
            data["registry"] = self.registry
        if self.constraints:
            data["constraints"] = dict(self.constraints)
        if self.packages:
            data["packages"] = dict(self.packages)
        return data


@dataclass(frozen=True, kw_only=True)
class Lock:
    profiles: Mapping[str, LockEntry] = field(default_factory=dict)
    references: Mapping[str, LockEntry] = field(default_factory=dict)

    def with_profile(self, name: str, entry: LockEntry) -> Lock:
        return replace(self, profiles={**self.profiles, name: entry})

    def with_reference(self, key: str, entry: LockEntry) -> Lock:
        return replace(self, references={**self.references, key: entry})

    def to_json(self) -> dict[str, Any]:
        return {
            "lock_version": LOCK_VERSION,
            "generator": f"rocmenv {__version__}",
            "profiles": {k: v.to_json() for k, v in sorted(self.profiles.items())},
            "references": {k: v.to_json() for k, v in sorted(self.references.items())},
        }

    def entries(self) -> Iterator[tuple[str, str, LockEntry]]:
        """``(kind, key, entry)`` for every entry: kind is ``profile`` or ``reference``."""
        for name, entry in sorted(self.profiles.items()):
            yield "profile", name, entry
        for key, entry in sorted(self.references.items()):
            yield "reference", key, entry


def _fail(path: Path, what: str) -> LockError:
    return LockError(
        f"{path}: {what}",
        hint="restore it from version control, or delete it and run `rocmenv pin` again",
    )


def _check_names(path: Path, where: str, raw: dict[str, Any]) -> None:
    """The entry's digests, repository and tag are each what the reference grammar allows."""
    for key in ("digest", "platform_digest"):
        try:
            validate_digest(raw[key])
        except InvalidReference:
            raise _fail(path, f"{where}.{key} = {raw[key]!r} is not a valid digest") from None
    try:
        repository = parse_repository(raw["repository"])
    except InvalidReference as err:
        raise _fail(path, f"{where}.repository: {err.what}") from None
    if repository.name != raw["repository"]:  # (a tag or digest is refused by the parser)
        raise _fail(path, f"{where}.repository = {raw['repository']!r} is not a canonical "
                    f"repository name ({repository.name!r})")  # fmt: skip
    tag = raw.get("tag")
    if tag is not None and not isinstance(tag, str):
        raise _fail(path, f"{where}.tag is not a string")
    if tag is not None:
        try:
            validate_tag(tag)
        except InvalidReference as err:
            raise _fail(path, f"{where}.tag: {err.what}") from None


def _entry(path: Path, where: str, raw: Any) -> LockEntry:
    if not isinstance(raw, dict):
        raise _fail(path, f"{where} is not an object")
    for key in raw:
        if key not in ENTRY_REQUIRED and key not in ENTRY_OPTIONAL:
            raise _fail(path, f"{where} has an unknown field {key!r}")
    for key in ENTRY_REQUIRED:
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(path, f"{where} lacks {key!r} (or it is not a string)")
    _check_names(path, where, raw)
    tag = raw.get("tag")
    registry = raw.get("registry")
    if registry is not None and not isinstance(registry, str):
        raise _fail(path, f"{where}.registry is not a string")
    pairs: dict[str, tuple[tuple[str, str], ...]] = {}
    for key in ("constraints", "packages"):
        value = raw.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise _fail(path, f"{where}.{key} must map strings to strings")
        pairs[key] = tuple(sorted(value.items()))
    return LockEntry(
        repository=raw["repository"],
        tag=tag,
        digest=raw["digest"],
        media_type=raw["media_type"],
        platform=raw["platform"],
        platform_digest=raw["platform_digest"],
        resolved_at=raw["resolved_at"],
        registry=registry,
        constraints=pairs["constraints"],
        packages=pairs["packages"],
    )


def parse_lock(path: Path, text: str) -> Lock:
    try:
        data = json.loads(text)
    except ValueError as err:
        raise _fail(path, f"not valid JSON ({err})") from None
    except RecursionError:
        raise _fail(path, "not a lockfile (JSON nested too deeply to read)") from None
    if not isinstance(data, dict):
        raise _fail(path, "not a JSON object")
    from rocmenv.settings.files import find_nul

    nul = find_nul(data)
    if nul is not None:
        raise _fail(path, f"{nul} contains a NUL character")
    version = data.get("lock_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _fail(path, "has no integer lock_version")
    if version > LOCK_VERSION:
        raise LockError(
            f"{path} has lock_version {version}; this rocmenv ({__version__}) reads up to "
            f"{LOCK_VERSION}",
            hint="upgrade rocmenv (it was written by a newer version); do not edit the file by hand",
        )
    if version < 1:
        raise _fail(path, f"lock_version {version} is not valid")
    for key in data:
        if key not in ("lock_version", "generator", "profiles", "references"):
            raise _fail(path, f"unknown top-level field {key!r}")
    sections: dict[str, dict[str, LockEntry]] = {}
    for section in ("profiles", "references"):
        raw = data.get(section, {})
        if not isinstance(raw, dict):
            raise _fail(path, f"{section} is not an object")
        sections[section] = {k: _entry(path, f"{section}.{k}", v) for k, v in raw.items()}
    return Lock(profiles=sections["profiles"], references=sections["references"])


def read_lock(path: Path) -> Lock:
    """The lock at ``path``; an empty one when the file does not exist."""
    from rocmenv.settings.files import MAX_FILE_BYTES

    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)  # pragma: no mutate (+2 reads the same: equivalent)
        if len(raw) > MAX_FILE_BYTES:
            raise _fail(path, f"larger than {MAX_FILE_BYTES >> 20} MiB, so not a lockfile")
        text = raw.decode("utf-8")  # pragma: no mutate (codec names ignore case)
    except FileNotFoundError:
        return Lock()
    except OSError as err:
        raise LockError(f"cannot read {path}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise _fail(path, f"not UTF-8 text (byte {err.start}), so not a lockfile") from None
    return parse_lock(path, text)


def render_lock(lock: Lock) -> str:
    return json.dumps(lock.to_json(), indent=2, sort_keys=True) + "\n"


@contextlib.contextmanager
def exclusive(path: Path, *, within: Path | None, timeout: float = 60.0) -> Iterator[int]:
    """Hold the advisory lock that serialises writers of ``path``; yields the directory's
    descriptor.

    The lock is taken on the directory itself (``flock`` works on directory descriptors), so
    no sidecar file is left next to the lockfile. The directory is opened without following
    a link inside ``within`` (the checkout: a test could swap it for one).
    """
    import fcntl

    from rocmenv.hostfs import LinkRefused, open_dir

    directory = path.parent
    try:
        fd = open_dir(directory, within=within)
    except LinkRefused as err:
        raise LockError(f"cannot lock {path}: {err}",
                        hint="remove the link; rocmenv writes no file through one") from err  # fmt: skip
    except OSError as err:
        raise LockError(
            f"cannot open {directory} to lock {path.name}: {err.strerror}",
            hint="check that the directory exists and is readable",
        ) from err
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise LockError(
                        f"{path} is being written by another rocmenv process (waited {timeout:.0f} s)",
                        hint="wait for the other `rocmenv pin` to finish",
                    ) from None
                time.sleep(0.05)
        yield fd
    finally:
        os.close(fd)


def _clean_stale_temps(dir_fd: int, name: str) -> None:
    """Remove temp files left by writers that were killed (their pid is gone), by name in
    the locked directory (never through a link).

    Equivalent mutants, marked: the pid is the first field however many splits are made;
    a file already gone only matters when another writer removed it first (a race)."""
    prefix = f".{name}."
    for candidate in sorted(os.listdir(dir_fd)):
        if not (candidate.startswith(prefix) and candidate.endswith(".tmp")):
            continue
        pid_text = candidate[len(prefix) :].split(".", 1)[0]  # pragma: no mutate
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            with contextlib.suppress(FileNotFoundError):  # pragma: no mutate
                os.unlink(candidate, dir_fd=dir_fd)
        except PermissionError:
            pass


def write_lock(path: Path, lock: Lock, *, within: Path | None, dir_fd: int | None = None) -> None:
    """Atomically replace ``path`` (call inside :func:`exclusive`; ``dir_fd`` is what it
    yields), following no link inside ``within``."""
    from rocmenv.hostfs import LinkRefused, open_dir

    text = render_lock(lock)
    parse_lock(path, text)  # what we write, we can read back: never a lock we then refuse
    try:
        if dir_fd is not None:
            _clean_stale_temps(dir_fd, path.name)
        else:
            own = open_dir(path.parent, within=within)
            try:
                _clean_stale_temps(own, path.name)
            finally:
                os.close(own)
        write_atomic(path, text, within=within)
    except LinkRefused as err:
        raise LockError(f"cannot write {path}: {err}",
                        hint="remove the link; rocmenv writes no file through one") from err  # fmt: skip


def update_lock(
    path: Path,
    change: Callable[[Lock], Lock],
    *,
    within: Path | None,
    timeout: float = 60.0,  # pragma: no mutate (how long to wait: not pinned without waiting it)
) -> Lock:
    """Read-modify-write under the lock, so concurrent updates of other entries survive."""
    with exclusive(path, within=within, timeout=timeout) as dir_fd:
        new = change(read_lock(path))
        write_lock(path, new, within=within, dir_fd=dir_fd)
        return new
