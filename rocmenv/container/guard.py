"""Untrusted mode: a policy the effective container must satisfy (docs/security.md "Running untrusted
code").

In an untrusted job (a forked pull request on a self-hosted GPU runner) everything in the
checkout is the attacker's: ``rocmenv.toml``, ``[tool.rocmenv]``, ``rocmenv.lock``, the tests.
What is trusted: the workflow's environment (``ROCMENV_*``), a config file outside the
checkout named by ``--config``/``ROCMENV_CONFIG``, the policy file named by
``ROCMENV_POLICY``, the runner's Docker config and daemon. So untrusted mode does not trust
what the profile asks for: :func:`rocmenv.container.builder.build_runspec` builds the trusted draft,
and :meth:`Guard.apply` takes it and returns the constrained spec (with the one notice line
that lists every change), or refuses — in one pass, here and nowhere else:

* it **neutralises** what has a safe equivalent that still lets the job run: GPU isolation
  by device nodes (``gpu-isolation = "env"`` ignored, and ``--gpus all`` on this host as the
  GPUs' own nodes, not the whole ``/dev/dri``),
  ``HIP_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` renumbered
  ``0..k-1`` (``gpu-env`` ignored), ``ipc = "host"`` → a private ``/dev/shm`` of the
  profile's ``shm-size``, the reference CI's ``SYS_PTRACE`` and ``seccomp=unconfined``
  dropped unless the policy allows them, Docker's default capabilities a planted file would
  use dropped (:data:`UNTRUSTED_CAP_DROP`: ``MKNOD``, ``SETFCAP``, ``FSETID``, …), no
  ``pass-env``/proxy variables from an untrusted profile, no ``secret-env`` at all, data
  mounts read-only, and **the checkout a copy-on-write view** (``kind = "overlay"``, made
  by the engine: :mod:`rocmenv.engine.overlay`) whose writes go with the container — the
  host's checkout, ``.git`` included, is never writable from it, so nothing it plants is
  there for the host to honour (:mod:`rocmenv.run.planted` sweeps as a second line; results
  leave through ``--output``: :mod:`rocmenv.run.output`); and the resource **caps** of
  :mod:`rocmenv.container.caps` (pids, memory, shm, ulimits: the policy's);
* it **refuses** (exit 2, :class:`PolicyViolation` naming key, value and rule) what has
  none: a privileged container; device nodes other than ``/dev/kfd`` and the selected GPUs'
  ``renderD*``/``card*``; any other added capability or security option that is not in the
  policy; host or ``container:`` network/IPC namespaces; groups other than video/render (or
  their GIDs on this host); a profile's data mount outside the sources the trusted side
  declared (the allowlist: the policy's ``mount-sources``, else the trusted config's and the
  built-in profiles' mounts; ``-v`` is trusted input; an optional mount rendered for another
  host keeps ``-v`` semantics — the engine creates an absent source — only for a source a
  trusted profile declares optional, any other must exist there) and any mount
  :mod:`rocmenv.container.hostpaths` refuses (the denylist, a second line); a checkout path the
  overlay's mount options cannot carry (``,``, ``:``, ``\\``); a profile asking more than
  a cap; images from repositories the policy does not allow.

**What the default policy allows and why.** ROCm needs ``/dev/kfd``, the GPUs' render (and
card) nodes and membership of the groups that own them (video/render); nothing else. The
reference CI adds ``--cap-add SYS_PTRACE`` and ``--security-opt seccomp=unconfined`` for
debuggers and profilers (rocgdb, rocprof attach by ptrace; the HSA runtime's NUMA calls
``mbind``/``set_mempolicy`` need either CAP_SYS_NICE or no seccomp filter, and fall back
without them): tests do not need them, and seccomp is the filter that keeps the kernel
surface shared with the other job on the runner small, so the default drops both (a policy
file can allow them). ``--ipc=host`` shares the host's ``/dev/shm`` with every other job;
the private ``/dev/shm`` sized by ``shm-size`` is what PyTorch/NCCL/RCCL need. Pid, UTS and
user namespaces cannot be set by a profile at all (no such keys).

The policy is the built-in :data:`DEFAULT_POLICY` or the TOML file ``ROCMENV_POLICY`` names
(:func:`rocmenv.settings.policy.load_policy`; a file inside the checkout is refused, it would
be the attacker's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from rocmenv.container.builder import dedupe, gpu_devices, with_gpu_env
from rocmenv.container.caps import Refusal, cap
from rocmenv.container.gpu import VISIBLE_DEVICE_VARS
from rocmenv.container.hostpaths import checkout_problem, mount_problem
from rocmenv.container.runspec import BindMount, Device, EnvVar, HostFacts, RunSpec
from rocmenv.errors import PolicyViolation, UsageError
from rocmenv.hostfs import is_under
from rocmenv.settings.policy import DEFAULT_POLICY, Policy, repository_name
from rocmenv.settings.profiles import BUILTIN_PROFILES, PROXY_VARS, Profile
from rocmenv.settings.resolve import Settings

BUILTIN_REPOSITORY: Final = "docker.io/rocm/sgl-dev"
# What the built-in rocm profile (the reference CI) adds that the default policy drops.
REFERENCE_CAPS: Final = ("SYS_PTRACE",)
REFERENCE_SECURITY_OPTS: Final = ("seccomp=unconfined",)
# Docker's default capabilities ROCm does not need and a planted file would use: device nodes
# (MKNOD), file capabilities (SETFCAP), set-id bits kept on write (FSETID); raw sockets
# (NET_RAW), the audit log (AUDIT_WRITE), bounding-set changes (SETPCAP), chroot (SYS_CHROOT).
# Dropped unless the policy's cap-add allows one (rocmenv.run.planted sweeps what is left).
UNTRUSTED_CAP_DROP: Final = (
    "MKNOD", "SETFCAP", "FSETID", "NET_RAW", "AUDIT_WRITE", "SETPCAP", "SYS_CHROOT",
)  # fmt: skip
SAFE_SECURITY_OPTS: Final = (
    "no-new-privileges",
    "no-new-privileges:true",
    "no-new-privileges=true",
)
# Root on the host by other means (the engine's socket, raw disks, /etc/shadow, sudo).
NEVER_GROUPS: Final = ("0", "root", "docker", "disk", "sudo", "shadow", "adm", "kmem")
PRIVATE_IPC: Final = ("private", "none", "shareable")
# What the overlay's mount options cannot carry: ',' ends lowerdir=, ':' separates lower
# directories (and podman's -v fields), '\\' escapes.
OVERLAY_UNSAFE: Final = ",:\\"
RULE_HINT: Final = (
    "remove it from the profile (or the command line); an administrator can allow it in "
    'the policy file named by ROCMENV_POLICY (docs/security.md "Running untrusted code")'
)


@dataclass(frozen=True, kw_only=True)
class Guard:
    """The policy as it applies to one run: which config is trusted, which images."""

    policy: Policy = DEFAULT_POLICY
    config_trusted: bool = False  # the profile came from a config outside the checkout
    images: tuple[str, ...] = (BUILTIN_REPOSITORY,)  # allowed repositories (domain/path)
    mirrors: tuple[tuple[str, str], ...] = ()  # trusted (registry, mirror host) pairs
    config_notes: tuple[str, ...] = ()  # what loading ignored from the checkout's config
    trusted_sources: tuple[str, ...] = ("built-in",)  # + the site and user files
    # the allowlist: data mounts of a profile only under these (None: the policy's
    # mount-sources, else the built-in profiles'; guard_for adds the trusted config's)
    mount_sources: tuple[str, ...] | None = None
    # optional mounts whose absent source the engine may create (rendered for another host):
    # those a trusted profile declares optional (None: the built-in profiles')
    optional_sources: tuple[str, ...] | None = None

    @property
    def declared_sources(self) -> tuple[str, ...]:
        if self.mount_sources is not None:
            return self.mount_sources
        return self.policy.mount_sources or builtin_mount_sources()

    def trusts(self, profile: Profile) -> bool:
        return profile.source in self.trusted_sources or self.config_trusted

    def apply(self, draft: RunSpec, profile: Profile, host: HostFacts) -> RunSpec:
        """The trusted ``draft`` (built from ``profile`` on ``host``) as untrusted mode allows
        it: neutralised where a safe equivalent exists, with one notice line listing every
        change first among its notes; :class:`PolicyViolation` (or :class:`UsageError` for a
        privileged container or a secret passed by ``-e``) for anything else."""
        self.precheck(profile, privileged=draft.privileged)
        for var in draft.env:
            if var.source in ("cli", "host") and var.name in profile.secret_env:
                raise UsageError(
                    f"-e {var.name}: {var.name} is a secret of profile {profile.name!r} and "
                    "untrusted mode passes no secrets"
                )
        changes = list(self.config_notes)
        if profile.gpu_isolation != "devices":
            changes.append("gpu-isolation env -> devices")
        ipc = draft.ipc
        if ipc == "host":
            ipc = "private"
            changes.append(f"ipc host -> private /dev/shm ({draft.shm_size or 'default'})")
        caps = [c for c in draft.cap_add
                if _norm_cap(c) in REFERENCE_CAPS and not self._cap_allowed(c)]  # fmt: skip
        if caps:
            changes.append(f"cap-add {','.join(caps)} dropped")
        drop = [c for c in UNTRUSTED_CAP_DROP if not self._cap_allowed(c)]
        have = {_norm_cap(c) for c in draft.cap_drop}
        cap_drop = (*draft.cap_drop, *(c for c in drop if c not in have))
        changes.append(f"cap-drop {','.join(drop)}")
        opts = [o for o in draft.security_opt
                if o in REFERENCE_SECURITY_OPTS and o not in self.policy.security_opt]  # fmt: skip
        if opts:
            changes.append(f"security-opt {','.join(opts)} dropped")
        env, env_changes, secrets_note = self._env(draft, profile)
        changes += env_changes
        devices, gpu_env, gpu_notes = self._gpus(draft, host, profile.gpu_devices)
        # pragma below: for a subset, gpu_env already names every visible-device variable
        # (devices isolation), so with_gpu_env has nothing to renumber (equivalent mutants)
        env = with_gpu_env(
            [e for e in env if e.source != "gpu"], gpu_env,
            renumbered=draft.gpu_selection.kind == "subset", selection=draft.gpu_selection,  # pragma: no mutate
        )  # fmt: skip
        if gpu_env:  # pragma below: every variable carries the same value (equivalent mutant)
            changes.append(f"{'/'.join(v.name for v in gpu_env)}={gpu_env[0].value}")  # pragma: no mutate  # fmt: skip
        mounts, mounts_note = _views(draft)
        mounts, created = self._created(mounts)
        if created:
            changes.append(f"optional mount sources must exist: {', '.join(created)}")
        limits, limit_changes, over = cap(draft, self.policy, host)
        changes += limit_changes
        spec = replace(
            draft, devices=devices, cap_add=tuple(c for c in draft.cap_add if c not in caps),
            cap_drop=cap_drop,
            security_opt=tuple(o for o in draft.security_opt if o not in opts), ipc=ipc,
            env=tuple(env), mounts=mounts, untrusted=True, **limits,
        )  # fmt: skip
        self._refuse(spec, profile, host, over)
        line = (f"untrusted mode: policy {self.policy.source}; privileged refused; "
                + "; ".join([*changes, mounts_note, *secrets_note]))  # fmt: skip
        rest = [n for n in draft.notes if n not in gpu_notes]
        return replace(spec, notes=(line, *gpu_notes, *rest))

    def precheck(self, profile: Profile, *, privileged: bool) -> None:
        """What is refused before anything is built: a privileged container."""
        if privileged:
            raise UsageError(
                f"profile {profile.name!r} is privileged and this run is untrusted "
                "(--untrusted, untrusted = true or ROCMENV_UNTRUSTED=1): refused",
                hint="use a profile without privileged = true for untrusted code",
            )

    def _env(self, draft: RunSpec, profile: Profile) -> tuple[list[EnvVar], list[str], list[str]]:
        """No secret, and from an untrusted profile no pass-env or proxy variables."""
        env = [e for e in draft.env if e.source != "secret"]
        changes: list[str] = []
        if not self.trusts(profile):
            dropped = [n for n in profile.pass_env if n not in self.policy.pass_env]
            if dropped:
                env = [e for e in env if not (e.source == "pass" and e.name in dropped)]
                changes.append(f"pass-env {','.join(dropped)} not passed")
            if profile.keep_proxy_env:
                env = [e for e in env if e.name not in PROXY_VARS]
                changes.append("keep-proxy-env ignored")
        secrets = (
            [f"secrets not passed: {', '.join(profile.secret_env)}"] if profile.secret_env else []
        )
        return env, changes, secrets

    def _gpus(
        self, draft: RunSpec, host: HostFacts, naming: str
    ) -> tuple[tuple[Device, ...], list[EnvVar], list[str]]:
        """Isolation by the selected GPUs' own nodes (also for ``all`` on this host), the
        visible-device variables numbered as the container sees them; with ``gpu-devices =
        "cdi"`` the selected GPUs' CDI names are those allowed devices."""
        # pragma below: gpu_devices reads isolation as "env" or not, so any other spelling of
        # "devices" is the same (an equivalent mutant)
        gpu_devs, gpu_env, notes = gpu_devices(
            draft.gpu_selection, host, isolation="devices", env_names=VISIBLE_DEVICE_VARS,  # pragma: no mutate
            nodes_for_all=host.check_host, naming=naming,
        )  # fmt: skip
        extra = [d for d in draft.devices if not d.gpu]
        return tuple(dedupe([*gpu_devs, *extra])), gpu_env, notes

    def _refuse(
        self, spec: RunSpec, profile: Profile, host: HostFacts, over: Sequence[Refusal] = ()
    ) -> None:
        """Raise :class:`PolicyViolation` listing every key of the constrained spec the
        policy refuses (and the caps ``over`` it: :func:`rocmenv.container.caps.cap`)."""
        refused = (
            *over,
            *self._option_refusals(spec, profile, host),
            *self._mount_refusals(spec, host),
        )
        bad: list[str] = [f"{key} = {value!r}: {rule}" for key, value, rule in refused]
        problem = self._image_problem(spec.image)
        if problem:
            bad.append(f"image = {spec.image!r}: {problem}")
        if bad:
            raise PolicyViolation(
                f"untrusted mode: the policy ({self.policy.source}) refuses profile "
                f"{profile.name!r} ({profile.source}): " + "; ".join(bad),
                hint=RULE_HINT,
            )

    def _option_refusals(
        self, spec: RunSpec, profile: Profile, host: HostFacts
    ) -> Iterator[Refusal]:
        """The devices, capabilities, security options, namespaces and groups refused."""
        allowed_devices = {d.host for d in spec.devices if d.gpu} | set(self.policy.devices)
        for dev in spec.devices:
            if dev.host not in allowed_devices:
                yield ("devices", dev.host, "only /dev/kfd and the selected GPUs' nodes")
        for name in spec.cap_add:
            if not self._cap_allowed(name):
                yield ("cap-add", name, "no added capabilities")
        for opt in spec.security_opt:
            if opt not in self.policy.security_opt and opt not in SAFE_SECURITY_OPTS:
                yield ("security-opt", opt,
                       "no unconfined or custom security options (no-new-privileges only)")  # fmt: skip
        if spec.network is not None and spec.network not in self.policy.network:
            yield ("network", spec.network, "no host or container network namespace")
        if spec.ipc is not None and spec.ipc not in PRIVATE_IPC:
            yield ("ipc", spec.ipc, "no host or container IPC namespace")
        for group, rule in self._group_problems(profile.group_add, host.group_gid):
            yield ("group-add", group, rule)

    def _mount_refusals(self, spec: RunSpec, host: HostFacts) -> Iterator[Refusal]:
        """The checkout's mount and the data mounts refused (the rule and its reason)."""
        for mount in spec.mounts:
            if mount.kind == "volume":
                continue  # an empty volume of the engine's (the output directory)
            if mount.target == spec.checkout:
                problem = checkout_problem(host.realpath(mount.source), host.env)
                if problem:
                    yield ("the checkout (the working directory's git top level)",
                           mount.source, problem)  # fmt: skip
            elif mount.origin != "guard":
                problem = mount_problem(
                    mount.source, spec.checkout, host.env, host.realpath, host.find_socket
                ) or self._undeclared(mount, host)  # fmt: skip
                if problem:
                    yield ("mounts", f"{mount.source}:{mount.target}", problem)

    def _created(self, mounts: tuple[BindMount, ...]) -> tuple[tuple[BindMount, ...], list[str]]:
        """An absent source created by the engine (an optional mount rendered for another
        host) only where a trusted profile declares that source optional: an untrusted
        profile does not choose which directories appear on the runner."""
        allowed = (
            self.optional_sources if self.optional_sources is not None else optional_mount_sources()
        )
        out: list[BindMount] = []
        refused: list[str] = []
        for mount in mounts:
            if mount.create_source and mount.source not in allowed:
                mount = replace(mount, create_source=False)
                refused.append(mount.source)
            out.append(mount)
        return tuple(out), refused

    def _undeclared(self, mount: BindMount, host: HostFacts) -> str | None:
        """The allowlist (the denylist of :mod:`rocmenv.container.hostpaths` is the second line): a
        profile's data mount only under a source the trusted side declared, judged where its
        links lead. ``-v`` is the workflow's own command line (trusted input)."""
        if mount.origin == "cli":
            return None
        real = host.realpath(mount.source)
        if any(is_under(real, host.realpath(root)) for root in self.declared_sources):
            return None
        declared = ", ".join(self.declared_sources) or "none"
        return (
            f"data mounts only under the sources the trusted side declared ({declared}: the "
            "policy's mount-sources, else the trusted config's profile mounts); the checkout "
            "itself is mounted at its own path already"
        )

    def _group_problems(
        self, groups: Sequence[str], group_gid: Callable[[str], int | None]
    ) -> list[tuple[str, str]]:
        allowed_gids = {str(g) for g in map(group_gid, self.policy.group_add) if g is not None}
        never = {*NEVER_GROUPS, *(str(g) for g in map(group_gid, NEVER_GROUPS) if g is not None)}
        out = []
        for group in groups:
            if group in never:
                out.append((group, "never a root-equivalent group, whatever the policy"))
            elif group not in self.policy.group_add and group not in allowed_gids:
                out.append(
                    (group, f"only {'/'.join(self.policy.group_add)} (the GPU nodes' groups)")
                )
        return out

    def _cap_allowed(self, cap: str) -> bool:
        return _norm_cap(cap) in {_norm_cap(c) for c in self.policy.cap_add}

    def check_image(self, image: str, profile: Profile) -> None:
        """Refuse an image (or repository) the policy does not allow."""
        problem = self._image_problem(image)
        if problem:
            raise PolicyViolation(
                f"untrusted mode: the policy ({self.policy.source}) refuses profile "
                f"{profile.name!r} ({profile.source}): image = {image!r}: {problem}",
                hint=RULE_HINT,
            )

    def _image_problem(self, image: str) -> str | None:
        if image == "IMAGE":  # a rendering without an image
            return None
        from rocmenv.errors import InvalidReference
        from rocmenv.grammar.reference import parse

        try:
            ref = parse(image)
        except InvalidReference:
            return "not a valid image reference"
        if ref.name in self.images:
            return None
        for allowed in self.images:
            domain, _, path = allowed.partition("/")
            if ref.path == path and (domain, ref.domain) in self.mirrors:
                return None
        return f"only images of {', '.join(self.images)} (and their trusted mirrors)"


def _views(draft: RunSpec) -> tuple[tuple[BindMount, ...], str]:
    """Data mounts read-only; the checkout a copy-on-write view whose writes are discarded
    with the container (:mod:`rocmenv.engine.overlay`): the host's checkout, ``.git``
    included, stays as it was, so the runner's next git command (``core.fsmonitor``, hooks,
    a submodule's ``.git``) and any tool the host later trusts meet only what was checked
    out. The path must be one the engines' overlay options can carry."""
    out: list[BindMount] = []
    for mount in draft.mounts:
        if mount.kind == "volume":
            out.append(mount)
        elif mount.target != draft.checkout:
            out.append(replace(mount, readonly=True))
        else:
            bad = next((c for c in mount.source if c in OVERLAY_UNSAFE or ord(c) < 0x20), None)
            if bad is not None:
                raise PolicyViolation(
                    f"untrusted mode: the checkout's path {mount.source!r} holds {bad!r}, which "
                    "the copy-on-write view's mount options cannot carry",
                    hint="check the repository out under a path without ',', ':' or '\\'",
                )
            out.append(replace(mount, kind="overlay", readonly=False))
    data = sum(1 for m in out if m.readonly)
    view = "; the checkout copy-on-write" if any(m.kind == "overlay" for m in out) else ""
    return tuple(out), f"{data} data mount(s) read-only{view}"


def _norm_cap(cap: str) -> str:
    cap = cap.strip().upper()
    return cap[4:] if cap.startswith("CAP_") else cap


def guard_for(settings: Settings, checkout: Path | None) -> Guard:
    """The guard of one run: the policy (``ROCMENV_POLICY`` or built-in), the allowed images
    (the policy's, else those a trusted project file names, else ``rocm/sgl-dev``) and the
    trusted registry mirrors that may serve them (a distrusted file's were not read)."""
    policy = settings.policy or DEFAULT_POLICY
    images = policy.images
    trusted = settings.project.trusted_sources
    if not images:
        # pragma below: the name was parsed when the profile was read (profiles.parse_image),
        # so repository_name cannot fail and never shows where (equivalent mutants)
        # fmt: off
        images = tuple(
            dict.fromkeys(
                repository_name(p.image.repository, f"[profiles.{p.name}].image")  # pragma: no mutate
                for _name, p in settings.project.profiles
                if p.image is not None and p.source in trusted
            )
        )
        # fmt: on
    mirrors = tuple((reg, host) for reg, hosts in settings.registry.mirrors for host in hosts)
    trusted_profiles = [p for _name, p in settings.project.profiles if p.source in trusted]
    mount_sources = policy.mount_sources or builtin_mount_sources(trusted_profiles)
    return Guard(
        policy=policy,
        config_trusted=settings.project.trusted,
        images=images or (BUILTIN_REPOSITORY,),
        mirrors=mirrors,
        config_notes=settings.notes,
        trusted_sources=trusted,
        mount_sources=mount_sources,
        optional_sources=optional_mount_sources(trusted_profiles),
    )


def builtin_mount_sources(trusted: Iterable[Profile] = ()) -> tuple[str, ...]:
    """The sources the trusted side declared: the built-in profiles' mounts and those of the
    ``trusted`` profiles (a config outside the checkout), reduced to their roots."""
    sources = [m.source for p in (*BUILTIN_PROFILES.values(), *trusted) for m in p.mounts]
    roots: list[str] = []
    # key=len: a parent first (pragma: so does the plain order, a parent is its children's prefix)
    for source in sorted(dict.fromkeys(sources), key=len):  # pragma: no mutate
        if not any(is_under(source, root) for root in roots):
            roots.append(source)
    return tuple(sorted(roots))


def optional_mount_sources(trusted: Iterable[Profile] = ()) -> tuple[str, ...]:
    """The sources the built-in profiles and the ``trusted`` ones declare optional."""
    profiles = (*BUILTIN_PROFILES.values(), *trusted)
    return tuple(sorted({m.source for p in profiles for m in p.mounts if m.optional}))
