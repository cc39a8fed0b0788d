"""Image drift: what moved behind the pinned tags of a lockfile, and what changed inside.

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
newer tag) are probed in containers (``rocmenv/launcher/probe.py``; pulled by digest, probe
results cached by ``linux/amd64`` manifest digest) and compared: packages, ROCm, Python and
shim verdicts. Nothing here writes the lockfile: ``rocmenv pin --update`` accepts a change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from rocmenv.errors import (
    CheckFailed,
    ConfigError,
    EngineError,
    RegistryError,
    RegistryNotFound,
    RegistryUnavailable,
    RocmenvError,
    UsageError,
)
from rocmenv.lock import Lock, LockEntry
from rocmenv.reference import Reference, parse
from rocmenv.registry import RegistryClient
from rocmenv.tags import Constraints, TagInfo, parse_tag, select, sort_key

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
Verdict = Literal["retire", "newly-needed", "still-needed", "not-needed", "unknown"]
Change = Literal["added", "removed", "upgraded", "downgraded", "changed"]

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
class PackageChange:
    name: str
    pinned: str | None
    new: str | None
    change: Change


@dataclass(frozen=True, kw_only=True)
class ShimChange:
    name: str
    pinned: bool | None  # would apply in the pinned image (None: unknown / not in the bundle)
    new: bool | None
    verdict: Verdict
    message: str


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
        from packaging.version import Version

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


def facts_from_probe(reference: str, probe: Mapping[str, Any]) -> ImageFacts:
    python = probe.get("python") or {}
    rocm = probe.get("rocm") or {}
    dists = probe.get("distributions") or {}
    shims = probe.get("shims") or []
    return ImageFacts(
        reference=reference,
        python=python.get("version"),
        rocm=rocm.get("version"),
        distributions=tuple(sorted((str(k), str(v)) for k, v in dists.items())),
        shims=tuple(sorted((str(s["name"]), s.get("would_apply")) for s in shims)),
    )


def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _direction(before: str, after: str) -> Change:
    from packaging.version import InvalidVersion, Version

    try:
        return "upgraded" if Version(after) > Version(before) else "downgraded"
    except InvalidVersion:
        return "changed"


def diff_packages(
    pinned: Mapping[str, str] | Sequence[tuple[str, str]],
    new: Mapping[str, str] | Sequence[tuple[str, str]],
) -> tuple[PackageChange, ...]:
    """Added, removed and changed distributions (names compared PEP 503-normalised)."""
    a = {
        _canonical(k): (k, v)
        for k, v in (pinned.items() if isinstance(pinned, Mapping) else pinned)
    }
    b = {_canonical(k): (k, v) for k, v in (new.items() if isinstance(new, Mapping) else new)}
    changes: list[PackageChange] = []
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            changes.append(
                PackageChange(name=a[key][0], pinned=a[key][1], new=None, change="removed")
            )
        elif key not in a:
            changes.append(
                PackageChange(name=b[key][0], pinned=None, new=b[key][1], change="added")
            )
        elif a[key][1] != b[key][1]:
            changes.append(
                PackageChange(
                    name=b[key][0],
                    pinned=a[key][1],
                    new=b[key][1],
                    change=_direction(a[key][1], b[key][1]),
                )
            )
    return tuple(changes)


def _shim_verdict(name: str, before: bool | None, after: bool | None) -> ShimChange:
    if before is True and after is False:
        verdict: Verdict = "retire"
        text = "needed in pinned image, not needed in new one: can be retired"
    elif before is False and after is True:
        verdict, text = (
            "newly-needed",
            "not needed in pinned image, needed in new one: newly needed",
        )
    elif before is True and after is True:
        verdict, text = "still-needed", "needed in both images"
    elif before is False and after is False:
        verdict, text = "not-needed", "needed in neither image"
    else:

        def say(v: bool | None) -> str:
            return {True: "needed", False: "not needed", None: "unknown"}[v]

        verdict = "unknown"
        text = (
            f"{say(before)} in pinned image, {say(after)} in new one (could not be told statically)"
        )
    return ShimChange(name=name, pinned=before, new=after, verdict=verdict, message=text)


def diff_shims(
    pinned: Sequence[tuple[str, bool | None]], new: Sequence[tuple[str, bool | None]]
) -> tuple[ShimChange, ...]:
    a, b = dict(pinned), dict(new)
    return tuple(_shim_verdict(n, a.get(n), b.get(n)) for n in sorted(a.keys() | b.keys()))


def compare(against: Literal["moved", "newer"], pinned: ImageFacts, new: ImageFacts) -> Inspection:
    return Inspection(
        against=against,
        new_reference=new.reference,
        pinned=pinned,
        new=new,
        packages=diff_packages(pinned.distributions, new.distributions),
        shims=diff_shims(pinned.shims, new.shims),
    )


Prober = Callable[[str], Mapping[str, Any]]  # engine reference -> probe.py's JSON


class ProbeCache:
    """Probe results by ``linux/amd64`` manifest digest: each image is probed once per run,
    also when several threads ask for it at the same time."""

    def __init__(self, prober: Prober) -> None:
        self._prober = prober
        self._lock = threading.Lock()
        self._keys: dict[str, threading.Lock] = {}
        self._facts: dict[str, ImageFacts] = {}
        self.probes = 0

    def facts(self, platform_digest: str, reference: str) -> ImageFacts:
        with self._lock:
            key_lock = self._keys.setdefault(platform_digest, threading.Lock())
        with key_lock:
            if platform_digest not in self._facts:
                probe = self._prober(reference)
                with self._lock:
                    self.probes += 1
                self._facts[platform_digest] = facts_from_probe(reference, probe)
            cached = self._facts[platform_digest]
            return replace(cached, reference=reference)


def inspect_one(client: RegistryClient, cache: ProbeCache, result: ImageDrift) -> ImageDrift:
    """Probe the pinned and the new image of a drifted entry and compare them."""
    from rocmenv.pinning import engine_reference

    entry = result.target.entry
    if result.status != "drift":
        return result
    if (
        result.tag_state == "moved"
        and result.current_digest
        and (not entry.constraints or not result.newest_digest)
    ):
        against: Literal["moved", "newer"] = "moved"
        digest = result.current_digest
    elif result.newest_digest:
        against, digest = "newer", result.newest_digest
    else:  # a tag that is gone: nothing to compare with
        return result
    repo = parse(entry.repository)
    new_ref = engine_reference(entry.repository, digest, entry.registry)
    try:
        image = client.resolve_platform(
            Reference(domain=repo.domain, path=repo.path, digest=digest)
        )
        new_ref = engine_reference(entry.repository, digest, image.registry)
        pinned = cache.facts(
            entry.platform_digest, engine_reference(entry.repository, entry.digest, entry.registry)
        )
        new = cache.facts(image.platform_digest, new_ref)
    except (RegistryError, EngineError, ConfigError, CheckFailed) as err:
        problem = Problem.of(err)
        return replace(
            result, inspection=Inspection(against=against, new_reference=new_ref, problem=problem)
        )
    return replace(result, inspection=compare(against, pinned, new))


def inspect_all(
    client: RegistryClient, cache: ProbeCache, results: Sequence[ImageDrift], *, jobs: int = 2
) -> list[ImageDrift]:
    drifted = [r for r in results if r.status == "drift"]
    if not drifted:
        return list(results)
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(drifted)))) as pool:
        inspected = dict(
            zip(
                map(id, drifted),
                pool.map(lambda r: inspect_one(client, cache, r), drifted),
                strict=True,
            )
        )
    return [inspected.get(id(r), r) for r in results]


class EngineProber:
    """Pull by digest (when absent) and run the launcher probe through a container engine.

    The engine and the launcher bundle are made on first use, so ``drift`` without drift
    never touches the engine; when that fails, every later call fails the same way at once.
    """

    def __init__(
        self,
        open_engine: Callable[[], Any],
        open_bundle: Callable[[], Any],
        *,
        timeout: float = 300.0,
    ) -> None:
        self._open_engine = open_engine
        self._open_bundle = open_bundle
        self._timeout = timeout
        self._lock = threading.Lock()
        self._engine: Any = None
        self._bundle: Any = None
        self._failed: RocmenvError | None = None

    def _ready(self) -> tuple[Any, Any]:
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if self._engine is None:
                try:
                    engine = self._open_engine()
                    engine.ping()
                    self._bundle = self._open_bundle()
                except (EngineError, ConfigError) as err:
                    self._failed = err
                    raise
                self._engine = engine
            return self._engine, self._bundle

    def __call__(self, reference: str) -> Mapping[str, Any]:
        from rocmenv.shim_probe import EngineCapture, check_image_versions

        engine, bundle = self._ready()
        if not engine.image_exists(reference):
            engine.pull(reference)
        probe = check_image_versions(
            EngineCapture(engine), reference, bundle=bundle, timeout=self._timeout
        )
        return dict(probe)


# -- verdict ------------------------------------------------------------------------------------


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
