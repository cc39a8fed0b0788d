"""Drift, registry side: what moved behind the pinned tags of a lockfile, what is newer.

For every lock entry (profile or bare reference):

* **moved** — a ``HEAD`` of ``repository:tag`` (no pull-limit cost) answers another digest
  than the pinned one (``tag_state`` ``moved``), or nothing at all (``gone``: the tag, or a
  digest-only pin, no longer exists);
* **newer** — tags that are newer than the pinned one *and of the same line*:

  ===================  ==========================================================
  pinned by            newer means
  ===================  ==========================================================
  constraints          the constraints recorded in the lock, resolved again: every
                       match that sorts above the pinned tag (what ``pin --update``
                       would pick is the first)
  nightly tag          nightlies of the same ROCm, GPU family and suffix with a later
                       date (any SGLang: nightlies carry the latest release)
  release tag          releases of the same ROCm, GPU family and suffix with a higher
                       SGLang version (pre-releases only when the pin is one)
  dated floating tag   siblings ``<project>-rocm<NNN>-<gpu>-<date>`` with a later date
  date-only tag        date-only tags with the same suffix and a later date
  moving floating tag  nothing: its new builds show up as *moved*
  digest / unparsed    nothing (reported as such)
  ===================  ==========================================================

* **could not check** — a registry error other than "not found" (unreachable, 5xx or 429
  after the retries, auth, bad bytes). Such an image is never reported as "no drift", and
  once a registry failed after its retries, the other images on it fail fast.

With ``--inspect``, the pinned image and the new one (the tag's new digest, else the newest
newer tag) are probed and compared by :mod:`rocmenv.drift.inspect`. Nothing in drift writes
the lockfile: ``rocmenv pin --update`` accepts a change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal, cast

from rocmenv.contents.diff import PackageChange, ShimChange
from rocmenv.errors import (
    RegistryError,
    RegistryNotFound,
    RegistryUnavailable,
    RocmenvError,
    UsageError,
)
from rocmenv.grammar.reference import Reference, parse
from rocmenv.grammar.tags import Constraints, TagInfo, parse_tag, select, sort_key
from rocmenv.image.lock import Lock, LockEntry
from rocmenv.registry.client import RegistryClient

FailOn = Literal["moved", "newer", "any", "never"]
FAIL_ON: tuple[str, ...] = ("moved", "newer", "any", "never")
TagState = Literal["same", "moved", "gone", "unchecked"]
Basis = Literal[
    "constraints",
    "nightly",
    "release",
    "dated-sibling",
    "date-only",
    "moving",
    "digest",
    "unparsed",
]

REPORT_VERSION = 1
DEFAULT_JOBS = 8


@dataclass(frozen=True, kw_only=True)
class Target:
    kind: Literal["profile", "reference"]
    key: str
    entry: LockEntry


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Why an image (or its inspection) could not be checked."""

    type: str  # the exception class name, e.g. RegistryUnavailable
    message: str
    hint: str | None = None

    @classmethod
    def of(cls, err: RocmenvError) -> Problem:
        return cls(type=type(err).__name__, message=err.what, hint=err.hint)


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    """What the probe found in one image."""

    reference: str
    python: str | None
    rocm: str | None
    distributions: tuple[tuple[str, str], ...]
    shims: tuple[tuple[str, bool | None], ...]  # (name, would_apply)


@dataclass(frozen=True, kw_only=True)
class Inspection:
    against: Literal["moved", "newer"]  # the new image is the tag's new digest, or the newest tag
    new_reference: str
    pinned: ImageFacts | None = None
    new: ImageFacts | None = None
    packages: tuple[PackageChange, ...] = ()
    shims: tuple[ShimChange, ...] = ()
    problem: Problem | None = None


@dataclass(frozen=True, kw_only=True)
class ImageDrift:
    target: Target
    tag_state: TagState = "unchecked"
    current_digest: str | None = None
    basis: Basis = "digest"
    newer_tags: tuple[str, ...] = ()  # newest first
    newest_digest: str | None = None
    notes: tuple[str, ...] = ()
    problem: Problem | None = None
    inspection: Inspection | None = None

    @property
    def moved(self) -> bool:
        return self.tag_state in ("moved", "gone")

    @property
    def newer(self) -> bool:
        return bool(self.newer_tags)

    @property
    def status(self) -> Literal["ok", "drift", "error"]:
        if self.problem is not None:
            return "error"
        return "drift" if self.moved or self.newer else "ok"


# -- what to check ------------------------------------------------------------------------------


def targets(lock: Lock, profiles: Sequence[str] = ()) -> list[Target]:
    """Every entry of the lock, or only the named profiles (each must be pinned)."""
    if profiles:
        missing = [p for p in profiles if p not in lock.profiles]
        if missing:
            raise UsageError(
                f"profile(s) {', '.join(missing)} not pinned in the lockfile",
                hint="pin them first: " + " ".join(f"`rocmenv pin --profile {p}`" for p in missing),
            )
        return [
            Target(kind="profile", key=p, entry=lock.profiles[p]) for p in dict.fromkeys(profiles)
        ]
    found = [
        Target(kind=cast(Literal["profile", "reference"], kind), key=key, entry=entry)
        for kind, key, entry in lock.entries()
    ]
    if not found:
        raise UsageError(
            "nothing to check: the lockfile has no entries (or does not exist)",
            hint="pin images first with `rocmenv pin`, or point --lock at the lockfile",
        )
    return found


def lock_constraints(entry: LockEntry) -> Constraints:
    c = dict(entry.constraints)
    return Constraints(
        sglang=c.get("sglang"),
        rocm=c.get("rocm"),
        gpu=c.get("gpu"),
        family=c.get("family"),
        before=c.get("before"),
        project=c.get("project", "sglang"),
    )


def _same_line(pin: TagInfo, other: TagInfo) -> bool:
    return (
        other.family == pin.family
        and other.rocm == pin.rocm
        and other.gpu == pin.gpu
        and other.suffix == pin.suffix
        and other.project == pin.project
    )


def newer_than_pin(entry: LockEntry, tags: Sequence[TagInfo]) -> tuple[Basis, list[TagInfo], str]:
    """``(basis, newer tags newest first, note)`` for a pinned entry, given the repo's tags."""
    if entry.tag is None:
        return "digest", [], ""
    pin = parse_tag(entry.tag)
    if entry.constraints:
        c = lock_constraints(entry)
        matches = select(tags, c)
        if not matches:
            return "constraints", [], f"no tag matches {c.describe()} any more"
        key = sort_key(pin)
        return "constraints", [m for m in matches if sort_key(m) > key], ""
    if pin.family == "unknown":
        return "unparsed", [], f"tag {entry.tag!r} is not a known tag family: newer not checked"
    if pin.family == "floating" and pin.moving:
        return "moving", [], ""  # its new builds show up as "moved"
    if pin.family == "release":
        from rocmenv.launcher._vendor.packaging.version import Version

        have = Version(pin.sglang or "0")
        found = [
            t
            for t in tags
            if _same_line(pin, t)
            and t.sglang
            and Version(t.sglang) > have
            and (have.is_prerelease or not Version(t.sglang).is_prerelease)
        ]
        basis: Basis = "release"
    else:
        found = [
            t for t in tags if _same_line(pin, t) and not t.moving and t.date_key > pin.date_key
        ]
        basis = {"nightly": "nightly", "floating": "dated-sibling"}.get(pin.family, "date-only")  # type: ignore[assignment]
    return basis, sorted(found, key=sort_key, reverse=True), ""


# -- checking -----------------------------------------------------------------------------------


class _Shared:
    """State shared by the worker threads: tag listings per repository, dead registries."""

    def __init__(self, client: RegistryClient) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._repo_locks: dict[str, threading.Lock] = {}
        self._tags: dict[str, tuple[TagInfo, ...]] = {}
        self._down: dict[str, RegistryUnavailable] = {}

    def tags(self, repo: Reference) -> tuple[TagInfo, ...]:
        with self._lock:
            repo_lock = self._repo_locks.setdefault(repo.name, threading.Lock())
        with repo_lock:
            if repo.name not in self._tags:
                self._tags[repo.name] = tuple(parse_tag(t) for t in self.client.list_tags(repo))
            return self._tags[repo.name]

    def down(self, domain: str) -> RegistryUnavailable | None:
        with self._lock:
            return self._down.get(domain)

    def mark_down(self, domain: str, err: RegistryUnavailable) -> None:
        with self._lock:
            self._down.setdefault(domain, err)


def check_one(shared: _Shared, target: Target) -> ImageDrift:
    """Moved and newer for one entry; registry failures become ``problem`` (partial results kept)."""
    entry = target.entry
    result = ImageDrift(target=target)
    repo = parse(entry.repository)
    dead = shared.down(repo.domain)
    if dead is not None:
        return replace(
            result,
            problem=Problem(
                type=type(dead).__name__,
                message=f"not checked: {repo.domain} did not answer ({dead.what})",
                hint=dead.hint,
            ),
        )
    client = shared.client
    try:
        ref = repo.with_tag(entry.tag) if entry.tag else repo.with_digest(entry.digest)
        try:
            _, head = client.head_manifest(ref)
            state: TagState = "same" if head.digest == entry.digest else "moved"
            result = replace(result, tag_state=state, current_digest=head.digest)
        except RegistryNotFound as err:
            what = f"tag {entry.tag!r}" if entry.tag else f"digest {entry.digest}"
            return replace(
                result, tag_state="gone", notes=(f"{what} no longer exists: {err.what}",)
            )
        if entry.tag is None:
            return replace(result, basis="digest")
        pin = parse_tag(entry.tag)
        if not entry.constraints and (pin.family == "unknown" or pin.moving):
            basis, _, note = newer_than_pin(entry, ())
            return replace(result, basis=basis, notes=(note,) if note else ())
        basis, newer, note = newer_than_pin(entry, shared.tags(repo))
        result = replace(
            result,
            basis=basis,
            newer_tags=tuple(t.tag for t in newer),
            notes=(note,) if note else (),
        )
        if newer:
            _, newest = client.head_manifest(repo.with_tag(newer[0].tag))
            result = replace(result, newest_digest=newest.digest)
        return result
    except RegistryUnavailable as err:
        shared.mark_down(repo.domain, err)
        return replace(result, problem=Problem.of(err))
    except RegistryError as err:
        return replace(result, problem=Problem.of(err))


def check_all(
    client: RegistryClient,
    items: Sequence[Target],
    *,
    jobs: int = DEFAULT_JOBS,
    progress: Callable[[int, int], None] | None = None,
) -> list[ImageDrift]:
    """Check every target concurrently; results in the order of ``items``."""
    shared = _Shared(client)
    done = 0
    done_lock = threading.Lock()

    def work(target: Target) -> ImageDrift:
        nonlocal done
        result = check_one(shared, target)
        if progress is not None:
            with done_lock:
                done += 1
                progress(done, len(items))
        return result

    if jobs <= 1 or len(items) <= 1:
        return [work(t) for t in items]
    with ThreadPoolExecutor(max_workers=min(jobs, len(items)), thread_name_prefix="drift") as pool:
        return list(pool.map(work, items))


# -- inspecting ---------------------------------------------------------------------------------


def fails(result: ImageDrift, fail_on: FailOn) -> bool:
    """Does this image's drift fail the run under ``--fail-on``?"""
    if fail_on == "never":
        return False
    return (result.moved and fail_on in ("moved", "any")) or (
        result.newer and fail_on in ("newer", "any")
    )


def exit_code(results: Sequence[ImageDrift], fail_on: FailOn) -> int:
    """3 when any image could not be checked, 4 when an inspection failed, 1 for drift that
    ``fail_on`` counts, else 0."""
    from rocmenv.errors import EXIT_CHECK_FAILED, EXIT_ENGINE, EXIT_OK, EXIT_REGISTRY

    if any(r.problem is not None for r in results):
        return EXIT_REGISTRY
    if any(r.inspection is not None and r.inspection.problem is not None for r in results):
        return EXIT_ENGINE
    return EXIT_CHECK_FAILED if any(fails(r, fail_on) for r in results) else EXIT_OK


def accept_command(target: Target, lock_arg: str | None = None) -> str:
    """The ``rocmenv pin --update`` command that accepts the new state of ``target``."""
    lock = f" --lock {lock_arg}" if lock_arg else ""
    if target.kind == "profile":
        return f"rocmenv pin --update{lock} --profile {target.key}"
    return f"rocmenv pin --update{lock} {target.key}"
