"""Resolve tags from constraints, pin images to digests, validate pins, pick a profile's image.

The commands ``resolve``, ``pin``, ``validate`` (and ``run``, through
:func:`image_for_profile`) share this module; it talks to the registry through
:class:`rocmenv.registry.RegistryClient` and to the lockfile through :mod:`rocmenv.lock`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rocmenv.config import Config, ImageSpec, Profile
from rocmenv.context import Context
from rocmenv.errors import CheckFailed, ConfigError, DigestMismatch, RegistryNotFound
from rocmenv.reference import Reference, parse, parse_repository
from rocmenv.tags import Constraints, TagInfo, nearest, parse_tag, select

if TYPE_CHECKING:  # imported by the functions that need them: `run` of a pinned profile
    # needs neither the registry client nor the lockfile writer
    from rocmenv.lock import Lock, LockEntry
    from rocmenv.registry import PlatformImage, RegistryClient


def make_client(ctx: Context, config: Config) -> RegistryClient:
    from rocmenv.registry import RegistryClient

    return RegistryClient(ctx, config.registry)


def now_utc() -> str:
    import datetime as _dt

    return (
        _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    )


# -- resolve ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Resolution:
    repository: Reference
    best: TagInfo
    matches: tuple[TagInfo, ...]
    total: int
    unknown: tuple[TagInfo, ...]

    @property
    def reference(self) -> Reference:
        return self.repository.with_tag(self.best.tag)


def constraints_of(spec: ImageSpec) -> Constraints:
    return Constraints(
        sglang=spec.sglang, rocm=spec.rocm, gpu=spec.gpu, family=spec.family, before=spec.before
    )


def constraints_json(c: Constraints) -> dict[str, str]:
    return {k: v for k, v in c._items() if v is not None}


def resolve(client: RegistryClient, repo: Reference, constraints: Constraints) -> Resolution:
    """The newest tag of ``repo`` meeting ``constraints``; :class:`CheckFailed` naming the
    nearest candidates when none does."""
    tags = client.list_tags(repo)
    infos = [parse_tag(t) for t in tags]
    unknown = tuple(i for i in infos if i.family == "unknown")
    matches = select(infos, constraints)
    if not matches:
        close = nearest(infos, constraints)
        lines = [f"  {info.tag}  (differs in: {', '.join(failed)})" for info, failed in close]
        raise CheckFailed(
            f"no tag of {repo.familiar_name} matches {constraints.describe()} "
            f"({len(tags)} tags, {len(unknown)} unparsed)"
            + ("\nnearest candidates:\n" + "\n".join(lines) if lines else ""),
            hint="relax a constraint, or list what exists with `rocmenv tags list "
            f"{repo.familiar_name}`",
        )
    return Resolution(
        repository=repo, best=matches[0], matches=tuple(matches), total=len(tags), unknown=unknown
    )


# -- a profile's image ---------------------------------------------------------------------------


def profile_key(name: str) -> str:
    return name


def reference_key(ref: Reference) -> str:
    """Lock key of a bare reference: normalised, ``:latest`` made explicit."""
    return str(ref.docker_ref()) if not (ref.tag and ref.digest) else str(ref)


def spec_of(profile: Profile) -> ImageSpec:
    if profile.image is None:
        raise ConfigError(
            f"profile {profile.name!r} names no image",
            hint='set image = "rocm/sgl-dev" (and a tag or constraints) in its [profiles.'
            f"{profile.name}] table, or pass --image",
        )
    return profile.image


def entry_matches_spec(entry: LockEntry, spec: ImageSpec) -> bool:
    """Does a lock entry still describe what the profile asks for?"""
    if entry.repository != spec.repository:
        return False
    if spec.digest:
        return entry.digest == spec.digest
    if spec.has_constraints:
        return dict(entry.constraints) == constraints_json(constraints_of(spec))
    return entry.tag == (spec.tag or "latest")


@dataclass(frozen=True, kw_only=True)
class ImageChoice:
    ref: str  # what to give the engine
    digest: str | None
    source: Literal["cli", "lock", "tag", "resolved"]
    tag: str | None
    gpu_family: str | None  # from the tag (mi30x, mi35x, …) when known


def engine_reference(repository: str, digest: str, registry: str | None) -> str:
    """``repo@digest`` as the engine should pull it: from the mirror that served it, if any."""
    ref = parse(repository)
    from rocmenv.registry import DOCKER_HUB, DOCKER_HUB_API

    upstream = DOCKER_HUB_API if ref.domain == DOCKER_HUB else ref.domain
    if registry and registry not in (upstream, ref.domain):
        return f"{registry}/{ref.path}@{digest}"
    return f"{ref.familiar_name}@{digest}"


def image_for_profile(
    ctx: Context,
    config: Config,
    profile: Profile,
    *,
    cli_image: str | None = None,
    lock: Lock | None = None,
    client_factory: Callable[[], RegistryClient] | None = None,
) -> ImageChoice:
    """The image ``run`` should use: --image, else the profile's pin, else its tag, else the
    newest tag meeting its constraints (resolved now, and not reproducible: pin it)."""
    if cli_image:
        ref = parse(cli_image)
        info = parse_tag(ref.tag) if ref.tag else None
        return ImageChoice(
            ref=ref.familiar,
            digest=ref.digest,
            source="cli",
            tag=ref.tag,
            gpu_family=info.gpu if info else None,
        )
    from rocmenv.lock import read_lock

    spec = spec_of(profile)
    lock = lock if lock is not None else read_lock(config.lockfile)
    entry = lock.profiles.get(profile_key(profile.name))
    if entry is not None:
        if not entry_matches_spec(entry, spec):
            raise ConfigError(
                f"profile {profile.name!r} changed since it was pinned in {config.lockfile} "
                f"(locked: {entry.repository}:{entry.tag or ''}@{entry.digest[:19]}…)",
                hint=f"run `rocmenv pin --profile {profile.name} --update` to pin the new image",
            )
        info = parse_tag(entry.tag) if entry.tag else None
        return ImageChoice(
            ref=engine_reference(entry.repository, entry.digest, entry.registry),
            digest=entry.digest,
            source="lock",
            tag=entry.tag,
            gpu_family=info.gpu if info else None,
        )
    repo = parse_repository(spec.repository)
    if spec.digest:
        return ImageChoice(
            ref=f"{repo.familiar_name}@{spec.digest}",
            digest=spec.digest,
            source="tag",
            tag=spec.tag,
            gpu_family=None,
        )
    if spec.has_constraints:
        client = client_factory() if client_factory else make_client(ctx, config)
        with client:
            resolution = resolve(client, repo, constraints_of(spec))
        return ImageChoice(
            ref=resolution.reference.familiar,
            digest=None,
            source="resolved",
            tag=resolution.best.tag,
            gpu_family=resolution.best.gpu,
        )
    tag = spec.tag or "latest"
    return ImageChoice(
        ref=repo.with_tag(tag).familiar,
        digest=None,
        source="tag",
        tag=tag,
        gpu_family=parse_tag(tag).gpu,
    )


# -- pin ------------------------------------------------------------------------------------------


def entry_from(
    ref: Reference, image: PlatformImage, constraints: dict[str, str] | None = None
) -> LockEntry:
    from rocmenv.lock import LockEntry

    return LockEntry(
        repository=ref.name,
        tag=ref.tag,
        digest=image.digest,
        media_type=image.media_type,
        platform=image.platform,
        platform_digest=image.platform_digest,
        registry=image.registry,
        resolved_at=now_utc(),
        constraints=tuple(sorted((constraints or {}).items())),
    )


def pin_spec(client: RegistryClient, spec: ImageSpec) -> LockEntry:
    """Resolve a profile's image spec to a lock entry (network)."""
    repo = parse_repository(spec.repository)
    constraints: dict[str, str] | None = None
    if spec.digest:
        ref = Reference(domain=repo.domain, path=repo.path, tag=spec.tag, digest=spec.digest)
    elif spec.has_constraints:
        c = constraints_of(spec)
        ref = resolve(client, repo, c).reference
        constraints = constraints_json(c)
    else:
        ref = repo.with_tag(spec.tag or "latest")
    return entry_from(ref, client.resolve_platform(ref), constraints)


def pin_reference(client: RegistryClient, ref: Reference) -> LockEntry:
    ref = ref if (ref.tag or ref.digest) else ref.with_tag("latest")
    return entry_from(ref, client.resolve_platform(ref))


# -- validate -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Check:
    name: Literal["grammar", "exists", "platform", "pinned", "bytes"]
    ok: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class Validation:
    subject: str
    kind: Literal["profile", "reference"]
    checks: tuple[Check, ...]
    locked_digest: str | None = None
    current_digest: str | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def moved(self) -> bool:
        return bool(
            self.locked_digest and self.current_digest and self.locked_digest != self.current_digest
        )


def validate(
    client: RegistryClient,
    subject: str,
    kind: Literal["profile", "reference"],
    ref: Reference,
    entry: LockEntry | None,
) -> Validation:
    """Existence, ``linux/amd64``, tag still at the locked digest, and the bytes' digest.

    ``ref`` has a tag or a digest. Registry outages propagate (exit 3: could not check);
    what the registry says about the image becomes failed checks (exit 1).
    """
    checks = [Check(name="grammar", ok=True, detail=f"{ref} is a valid reference")]
    locked = entry.digest if entry else None
    current: str | None = None
    try:
        if ref.tag and not ref.digest:
            host, head = client.head_manifest(ref)
            current = head.digest
            checks.append(
                Check(name="exists", ok=True, detail=f"{ref.tag} → {head.digest} on {host}")
            )
            if locked is not None:
                if head.digest == locked:
                    checks.append(
                        Check(name="pinned", ok=True, detail=f"still at the locked {locked}")
                    )
                else:
                    checks.append(
                        Check(
                            name="pinned",
                            ok=False,
                            detail=f"tag {ref.tag!r} moved: locked {locked}, now {head.digest}",
                        )
                    )
            target = ref.with_digest(locked or head.digest)
        else:
            target = ref
        target = Reference(domain=target.domain, path=target.path, digest=target.digest)
        try:
            image = client.resolve_platform(target)
        except DigestMismatch as err:
            checks.append(Check(name="bytes", ok=False, detail=err.what))
            return Validation(
                subject=subject,
                kind=kind,
                checks=tuple(checks),
                locked_digest=locked,
                current_digest=current,
            )
        except CheckFailed as err:
            checks.append(Check(name="platform", ok=False, detail=err.what))
            return Validation(
                subject=subject,
                kind=kind,
                checks=tuple(checks),
                locked_digest=locked,
                current_digest=current,
            )
        if not ref.tag or ref.digest:
            checks.append(
                Check(name="exists", ok=True, detail=f"{target.digest} on {image.registry}")
            )
        checks.append(
            Check(name="platform", ok=True, detail=f"{image.platform} → {image.platform_digest}")
        )
        if entry is not None and entry.platform_digest != image.platform_digest:
            checks.append(
                Check(
                    name="pinned",
                    ok=False,
                    detail=f"linux/amd64 manifest differs from the lock: {entry.platform_digest} vs {image.platform_digest}",
                )
            )
        checks.append(Check(name="bytes", ok=True, detail="manifest bytes match their digests"))
    except RegistryNotFound as err:
        checks.append(Check(name="exists", ok=False, detail=err.what))
    return Validation(
        subject=subject,
        kind=kind,
        checks=tuple(checks),
        locked_digest=locked,
        current_digest=current,
    )
