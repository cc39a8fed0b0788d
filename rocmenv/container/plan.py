"""The one planner: from resolved settings and a request to the container a command runs.

``run``, ``shell``, ``options``, ``pull``, ``shims check`` and both suite backends go through
here; nothing else builds a container spec. The steps, in order:

1. the profile (already chosen by :mod:`rocmenv.settings.resolve`);
2. in untrusted mode the guard, and its image check before any registry is asked;
3. the image (:func:`rocmenv.image.pinning.choose_image`: ``--image`` > lock > profile);
4. the host facts (GPU inventory, groups, which paths exist, how sources resolve);
5. the spec: the trusted draft (:mod:`rocmenv.container.builder`), then the guard's constrained
   spec or refusal (:mod:`rocmenv.container.guard`), then the device check.

``options`` is "plan, then render". ``run`` plans before it contacts the engine (so an
untrusted run is refused before anything is pulled), and completes the plan with what only
the engine knows (the image's digest and environment) and the shim launcher:
:meth:`Plan.complete` runs the same steps with those facts added.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rocmenv.container.builder import add_launcher, build_runspec, check_devices
from rocmenv.container.hostpaths import find_socket
from rocmenv.container.labels import Identity
from rocmenv.container.runspec import HostFacts, LauncherMount, Overrides, RunSpec, wants_gpus
from rocmenv.context import Context, find_checkout
from rocmenv.image.pinning import ImageChoice, choose_image
from rocmenv.record import field, record, replace
from rocmenv.settings.profiles import Profile
from rocmenv.settings.resolve import Settings

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:  # the guard is imported by an untrusted plan only
    from rocmenv.container.guard import Guard

#: What a spec without an image says in its place (``options`` of a profile without one).
NO_IMAGE = "IMAGE"


@record
class PlanRequest:
    """What the command line asks of the container."""

    overrides: Overrides = field(default_factory=Overrides)
    for_this_host: bool = True  # False: rendering for another host (options gha/compose)
    group_names: bool = False  # keep group names rather than this host's GIDs
    needs_image: bool = True  # False: a profile without an image renders as IMAGE
    resolve_constraints: bool = True  # False: an unpinned constrained profile stays a repository


@record
class Plan:
    """A planned container: everything decided before the engine is asked."""

    settings: Settings
    profile: Profile
    image: ImageChoice | None
    guard: Guard | None
    overrides: Overrides
    facts: HostFacts
    spec: RunSpec  # checked (and constrained, when untrusted); no launcher, no run identity

    def complete(
        self,
        *,
        identity: Identity,
        image_digest: str | None,
        image_env: Mapping[str, str],
        launcher: LauncherMount | None,
        engine_image: str | None = None,
    ) -> RunSpec:
        """The spec ``run`` creates: the same steps with the run's identity, the image's
        digest and environment (for ``PYTHONPATH``), and the shim launcher. ``engine_image``:
        the engine's name for the image when it does not know it by the reference (the id
        of an image the runner image cache loaded; the reference stays in the labels)."""
        facts = replace(
            self.facts, identity=identity, image_digest=image_digest, image_env=image_env
        )
        return build_spec(
            self.profile, self.overrides, facts, image=engine_image or self.spec.image,
            guard=self.guard, launcher=launcher,
        )  # fmt: skip


def choose(
    ctx: Context,
    settings: Settings,
    *,
    cli_image: str | None = None,
    needs_image: bool = True,
    resolve_constraints: bool = True,
) -> tuple[Guard | None, ImageChoice | None]:
    """The guard (untrusted mode) and the image: an image the policy refuses is refused
    before any registry or engine is asked."""
    profile = settings.profile
    guard = None
    if settings.untrusted:
        from rocmenv.container.guard import guard_for

        guard = guard_for(settings, find_checkout(ctx.cwd))
    if guard is not None and profile.image is not None and not cli_image:
        guard.check_image(profile.image.repository, profile)
    if not needs_image and not cli_image and profile.image is None:
        return guard, None
    choice = choose_image(
        ctx, settings, profile, cli_image=cli_image, resolve_constraints=resolve_constraints
    )
    return guard, choice


def plan(ctx: Context, settings: Settings, request: PlanRequest) -> Plan:
    """Plan the container of ``settings.profile`` for ``request`` (module docstring)."""
    guard, image = choose(
        ctx, settings, cli_image=request.overrides.image, needs_image=request.needs_image,
        resolve_constraints=request.resolve_constraints,
    )  # fmt: skip
    facts = host_facts(ctx, settings, request)
    spec = build_spec(
        settings.profile, request.overrides, facts,
        image=image.image if image is not None else NO_IMAGE, guard=guard,
    )  # fmt: skip
    return Plan(
        settings=settings, profile=settings.profile, image=image, guard=guard,
        overrides=request.overrides, facts=facts, spec=spec,
    )  # fmt: skip


def build_spec(
    profile: Profile,
    overrides: Overrides,
    facts: HostFacts,
    *,
    image: str,
    guard: Guard | None = None,
    launcher: LauncherMount | None = None,
) -> RunSpec:
    """The trusted draft, constrained by the ``guard`` when there is one, its devices
    checked, then rocmenv's own launcher mount (which the guard does not judge)."""
    if guard is not None:
        privileged = profile.privileged if overrides.privileged is None else overrides.privileged
        guard.precheck(profile, privileged=privileged)
    spec = build_runspec(profile, overrides, facts, image=image)
    if guard is not None:
        spec = guard.apply(spec, profile, facts)
    check_devices(spec, facts)
    return add_launcher(spec, launcher, facts) if launcher is not None else spec


def host_facts(ctx: Context, settings: Settings, request: PlanRequest) -> HostFacts:
    """What the spec needs to know about the host. Rendering for another host asks little of
    this one: no device or mount-source checks, no GIDs, and no GPU inventory unless this
    host has GPUs to name. But sources resolve exactly as ``run`` resolves them, in every
    format (rendering = running): links followed, ``//`` collapsed, sockets searched — the
    engine that mounts them follows links too."""
    from rocmenv.container.pool import host_inventory

    profile, here = settings.profile, request.for_this_host
    inventory = None
    if wants_gpus(profile, request.overrides):  # this host's pool only when rendering for it
        found = host_inventory(settings.host, with_pool=here)
        if found.gpus or here:
            inventory = found
    return HostFacts(
        env=ctx.env,
        cwd=ctx.cwd,
        checkout=find_checkout(ctx.cwd) if profile.mount_checkout else None,
        inventory=inventory,
        # GIDs are this host's: only a rendering for this host uses them
        group_gid=host_group_gid if here and not request.group_names else _no_gid,
        path_exists=os.path.exists,
        check_host=here,
        realpath=os.path.realpath,
        find_socket=find_socket,
    )

    return None


def host_group_gid(name: str) -> int | None:
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def _no_gid(_name: str) -> int | None:
    return None
