"""Resolve tags from constraints, pin images to digests, validate pins, pick a profile's image.

The commands ``resolve``, ``pin``, ``validate`` (and every command that
runs an image, through :func:`choose_image`) share this module; it talks to the registry through
:class:`rocmenv.registry.RegistryClient` and to the lockfile through :mod:`rocmenv.lock`.
"""

from __future__ import annotations

from collections.abc import Callable

from rocmenv.context import Context
from rocmenv.errors import CheckFailed, ConfigError, DigestMismatch, RegistryNotFound
from rocmenv.grammar.reference import Reference, parse, parse_repository
from rocmenv.grammar.tags import Constraints, TagInfo, nearest, parse_tag, select
from rocmenv.record import record
from rocmenv.settings.profiles import ImageSpec, Profile
from rocmenv.settings.resolve import Settings

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:  # imported by the functions that need them: `run` of a pinned profile
    from typing import Literal

    # needs neither the registry client nor the lockfile writer
    from rocmenv.image.lock import Lock, LockEntry
    from rocmenv.registry.client import RegistryClient
    from rocmenv.registry.manifest import PlatformImage
    from rocmenv.settings.registry import RegistrySettings

    ImageSource = Literal["cli", "lock", "profile", "resolved"]


def make_client(ctx: Context, settings: Settings) -> RegistryClient:
    """The registry client of a command; an untrusted one keeps no token for later commands
    (an untrusted run teaches the trusted side nothing)."""
    from rocmenv.registry.client import RegistryClient

    return RegistryClient(ctx, settings.registry, token_cache=not settings.untrusted)


def now_utc() -> str:
    import datetime as _dt

    return (
        _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    )


# -- resolve ----------------------------------------------------------------------------------


@record
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


@record
class ImageChoice:
    """Which image a command uses, decided once (:func:`choose_image`)."""

    reference: Reference  # what the engine gets: validated, with a tag and/or a digest
    source: ImageSource
    tag: str | None  # the tag it came from (the lock's tag for a pinned profile)
    gpu_family: str | None  # from the tag grammar (mi30x, mi35x, …) when the tag says

    @property
    def image(self) -> str:
        """The reference as the engine and the user read it (``rocm/sgl-dev@sha256:…``)."""
        return self.reference.familiar

    @property
    def repository(self) -> str:
        """The image's name as the engine records it in ``RepoDigests``."""
        return self.reference.familiar_name

    @property
    def digest(self) -> str | None:
        return self.reference.digest


def engine_reference(
    repository: str, digest: str, registry: str | None, *, pull_from_mirror: bool = False
) -> Reference:
    """``repo@digest`` as the engine should pull it: the canonical reference, so the daemon's
    own ``registry-mirrors`` apply (as ``docker pull`` does); the mirror that served the pin
    (the lock's ``registry``, information only) only with ``[registry] pull-from-mirror``."""
    ref = parse(repository)
    from rocmenv.registry.manifest import DOCKER_HUB, DOCKER_HUB_API

    upstream = DOCKER_HUB_API if ref.domain == DOCKER_HUB else ref.domain
    if pull_from_mirror and registry and registry not in (upstream, ref.domain):
        return parse(f"{registry}/{ref.path}@{digest}")
    return Reference(domain=ref.domain, path=ref.path, digest=digest)


def unpinned_reference(ref: Reference, registry: RegistrySettings) -> Reference:
    """An image no lock pins, as the engine should pull it: the reference itself, or with
    ``[registry] pull-from-mirror`` (``ROCMENV_PULL_FROM_MIRROR=1``) through the first
    mirror of its registry — a runner behind a mirror must not reach the registry itself,
    pinned or not (a pinned image goes through the mirror that served the pin:
    :func:`engine_reference`)."""
    mirrors = registry.mirrors_for(ref.domain) if registry.pull_from_mirror else ()
    if not mirrors:
        return ref
    at = (f":{ref.tag}" if ref.tag else "") + (f"@{ref.digest}" if ref.digest else "")
    return parse(f"{mirrors[0]}/{ref.path}{at}")


def _choice(ref: Reference, source: ImageSource, tag: str | None) -> ImageChoice:
    return ImageChoice(
        reference=ref, source=source, tag=tag, gpu_family=parse_tag(tag).gpu if tag else None
    )


def choose_image(
    ctx: Context,
    config: Settings,
    profile: Profile,
    *,
    cli_image: str | None = None,
    lock: Lock | None = None,
    resolve_constraints: bool = True,
    client_factory: Callable[[], RegistryClient] | None = None,
) -> ImageChoice:
    """The one decision of which image ``run``, ``shell``, ``options``, ``shims check`` and
    ``drift`` use: ``--image``, else the profile's pin in the lock (an error when the profile
    changed since), else its digest or tag, else the newest tag meeting its constraints
    (resolved now, not reproducible: pin it). With ``resolve_constraints=False`` (rendering
    options offline) an unpinned constrained profile gives its bare repository."""
    if cli_image:
        ref = parse(cli_image)  # nothing unvalidated reaches the engine
        return _choice(unpinned_reference(ref, config.registry), "cli", ref.tag)
    from rocmenv.image.lock import read_lock

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
        return _choice(
            engine_reference(
                entry.repository,
                entry.digest,
                entry.registry,
                pull_from_mirror=config.registry.pull_from_mirror,
            ),
            "lock",
            entry.tag,
        )
    repo = parse_repository(spec.repository)
    mirrored = config.registry
    if spec.digest:
        ref = Reference(domain=repo.domain, path=repo.path, digest=spec.digest)
        return _choice(unpinned_reference(ref, mirrored), "profile", spec.tag)
    if spec.has_constraints:
        if not resolve_constraints:
            return _choice(unpinned_reference(repo, mirrored), "profile", None)
        client = client_factory() if client_factory else make_client(ctx, config)
        with client:
            resolution = resolve(client, repo, constraints_of(spec))
        best = resolution.best.tag
        return _choice(unpinned_reference(resolution.reference, mirrored), "resolved", best)
    tag = spec.tag or "latest"
    return _choice(unpinned_reference(repo.with_tag(tag), mirrored), "profile", tag)


# -- pin ------------------------------------------------------------------------------------------


def entry_from(
    ref: Reference, image: PlatformImage, constraints: dict[str, str] | None = None
) -> LockEntry:
    from rocmenv.image.lock import LockEntry

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


def pin_spec(client: RegistryClient, spec: ImageSpec, old: LockEntry | None = None) -> LockEntry:
    """Resolve a profile's image spec to a lock entry (network); ``old`` is kept, without a
    manifest GET, when the tag it names still points at its digest."""
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
    kept = _unchanged(client, ref, old, constraints)
    if kept is not None:
        return kept
    return checked_entry(entry_from(ref, client.resolve_platform(ref), constraints))


def pin_reference(
    client: RegistryClient, ref: Reference, old: LockEntry | None = None
) -> LockEntry:
    ref = ref if (ref.tag or ref.digest) else ref.with_tag("latest")
    kept = _unchanged(client, ref, old, None)
    if kept is not None:
        return kept
    return checked_entry(entry_from(ref, client.resolve_platform(ref)))


def _unchanged(
    client: RegistryClient,
    ref: Reference,
    old: LockEntry | None,
    constraints: dict[str, str] | None,
) -> LockEntry | None:
    """``old`` when ``ref``'s tag still points at its digest (one HEAD: spares the pull limit)."""
    if old is None or ref.digest or not ref.tag or old.tag != ref.tag:
        return None
    if old.repository != ref.name or dict(old.constraints) != (constraints or {}):
        return None
    _, head = client.head_manifest(ref)
    return old if head.digest == old.digest else None


def checked_entry(entry: LockEntry) -> LockEntry:
    """Every digest of a new entry valid (sha256/384/512) before it can reach the lockfile, so
    rocmenv never writes a lock that it then refuses to read."""
    from rocmenv.errors import RegistryProtocolError
    from rocmenv.grammar.reference import digest_problem

    for name, value in (("digest", entry.digest), ("platform digest", entry.platform_digest)):
        problem = digest_problem(value)
        if problem is not None:
            raise RegistryProtocolError(
                f"{entry.repository}: the registry's {name} {value!r} is not valid: "
                f"{problem.detail}",
                hint="nothing was written to the lockfile; the registry or a mirror sent a "
                "malformed or unsupported digest",
            )
    return entry


# -- validate -------------------------------------------------------------------------------------


@record
class Check:
    name: Literal["grammar", "exists", "platform", "pinned", "bytes"]
    ok: bool
    detail: str


@record
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

    def done() -> Validation:
        return Validation(
            subject=subject,
            kind=kind,
            checks=tuple(checks),
            locked_digest=locked,
            current_digest=current,
        )

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
            if entry is not None and head.digest == locked:
                return _validated_by_head(client, subject, kind, ref, entry, checks)
            target = ref.with_digest(locked or head.digest)
        elif entry is not None and ref.digest == locked:
            host, head = client.head_manifest(ref)
            current = head.digest
            checks.append(Check(name="exists", ok=True, detail=f"{head.digest} on {host}"))
            return _validated_by_head(client, subject, kind, ref, entry, checks)
        else:
            target = ref
        target = Reference(domain=target.domain, path=target.path, digest=target.digest)
        try:
            image = client.resolve_platform(target)
        except DigestMismatch as err:
            checks.append(Check(name="bytes", ok=False, detail=err.what))
            return done()
        except CheckFailed as err:
            checks.append(Check(name="platform", ok=False, detail=err.what))
            return done()
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
    return done()


def _validated_by_head(
    client: RegistryClient,
    subject: str,
    kind: Literal["profile", "reference"],
    ref: Reference,
    entry: LockEntry,
    checks: list[Check],
) -> Validation:
    """The registry's digest equals the lock: confirm the locked linux/amd64 manifest is still
    served by ``HEAD`` too, and fetch nothing — a manifest ``GET`` counts against Docker Hub's
    pull limit, a ``HEAD`` does not. The bytes were verified when the entry was pinned."""
    if entry.platform_digest != entry.digest:
        platform = Reference(domain=ref.domain, path=ref.path, digest=entry.platform_digest)
        client.head_manifest(platform)
    checks.append(
        Check(
            name="platform",
            ok=True,
            detail=f"{entry.platform} → {entry.platform_digest} (as locked; still served)",
        )
    )
    checks.append(
        Check(
            name="bytes",
            ok=True,
            detail="unchanged since pinned (verified then); not downloaded again, sparing the "
            "pull limit",
        )
    )
    return Validation(
        subject=subject,
        kind=kind,
        checks=tuple(checks),
        locked_digest=entry.digest,
        current_digest=entry.digest,
    )
