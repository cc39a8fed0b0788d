"""Untrusted mode: a policy the effective container must satisfy (README "Running untrusted
code").

In an untrusted job (a forked pull request on a self-hosted GPU runner) everything in the
checkout is the attacker's: ``rocmenv.toml``, ``[tool.rocmenv]``, ``rocmenv.lock``, the tests.
What is trusted: the workflow's environment (``ROCMENV_*``), a config file outside the
checkout named by ``--config``/``ROCMENV_CONFIG``, the policy file named by
``ROCMENV_POLICY``, the runner's Docker config and daemon. So untrusted mode does not trust
what the profile asks for; :func:`rocmenv.spec.builder.build_runspec` builds the spec and this
module decides, in two steps:

* :meth:`Guard.constrain` (before building) **neutralises** what has a safe equivalent that
  still lets the job run: GPU isolation by device nodes (``gpu-isolation = "env"`` ignored),
  ``HIP_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` renumbered
  ``0..k-1`` (``gpu-env`` ignored), ``ipc = "host"`` → a private ``/dev/shm`` of the
  profile's ``shm-size``, the reference CI's ``SYS_PTRACE`` and ``seccomp=unconfined``
  dropped unless the policy allows them, no ``pass-env``/proxy variables from an untrusted
  profile, no ``secret-env`` at all, data mounts and ``.git`` read-only;
* :meth:`Guard.check` (after building) **refuses** (exit 2, :class:`PolicyViolation` naming
  key, value and rule) what has none: device nodes other than ``/dev/kfd`` and the selected
  GPUs' ``renderD*``/``card*``; any other added capability or security option that is not
  in the policy; host or ``container:`` network/IPC namespaces; groups other than
  video/render (or their GIDs on this host); mounts of ``/``, ``/proc``, ``/sys``, ``/dev``,
  ``/etc``, ``/root``, ``/home``, ``/run``, ``/boot``, engine state, of a socket (``*.sock``,
  anything that is a socket, a directory with one among its first
  :data:`SOCKET_SCAN_LIMIT` entries, anything containing the engine's socket), of a directory
  containing the checkout, of the runner's work directories (``RUNNER_WORKSPACE``'s
  parent, ``RUNNER_TEMP``, ``RUNNER_TOOL_CACHE``) outside the checkout; images from
  repositories the policy does not allow.

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
(see :func:`load_policy`; a file inside the checkout is refused, it would be the attacker's).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rocmenv.errors import ConfigError, PolicyViolation, UsageError

if TYPE_CHECKING:
    from rocmenv.settings.profiles import Profile
    from rocmenv.settings.project import Config
    from rocmenv.spec.runspec import BindMount, Device

UNTRUSTED_ENV: Final = "ROCMENV_UNTRUSTED"
POLICY_ENV: Final = "ROCMENV_POLICY"
TRUE_WORDS: Final = ("1", "true", "yes")
FALSE_WORDS: Final = ("0", "false", "no")
VISIBLE_DEVICE_VARS: Final = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
BUILTIN_REPOSITORY: Final = "docker.io/rocm/sgl-dev"
# What the built-in rocm profile (the reference CI) adds that the default policy drops.
REFERENCE_CAPS: Final = ("SYS_PTRACE",)
REFERENCE_SECURITY_OPTS: Final = ("seccomp=unconfined",)
SAFE_SECURITY_OPTS: Final = (
    "no-new-privileges",
    "no-new-privileges:true",
    "no-new-privileges=true",
)
# Root on the host by other means (the engine's socket, raw disks, /etc/shadow, sudo).
NEVER_GROUPS: Final = ("0", "root", "docker", "disk", "sudo", "shadow", "adm", "kmem")
PRIVATE_IPC: Final = ("private", "none", "shareable")
FORBIDDEN_ROOTS: Final = (
    "/proc", "/sys", "/dev", "/etc", "/root", "/home", "/run", "/var/run", "/boot",
    "/var/lib/docker", "/var/lib/containers", "/var/lib/kubelet",
)  # fmt: skip
FORBIDDEN_EXACT: Final = ("/", "/tmp", "/var/tmp", "/var", "/var/lib", "/usr", "/lib", "/bin")
SOCKET_SCAN_LIMIT: Final = 10_000  # entries of a mounted directory searched for sockets
ENGINE_SOCKETS: Final = ("/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock")
POLICY_KEYS: Final = (
    "cap-add", "security-opt", "group-add", "devices", "network", "images", "mount-sources",
    "pass-env",
)  # fmt: skip
RULE_HINT: Final = (
    "remove it from the profile (or the command line); an administrator can allow it in "
    'the policy file named by ROCMENV_POLICY (README "Running untrusted code")'
)


def untrusted_env(env: Mapping[str, str]) -> bool:
    """``ROCMENV_UNTRUSTED``: ``1/true/yes`` or ``0/false/no`` (any case); unset is false.
    Anything else is a :class:`UsageError`, never "trusted"."""
    if UNTRUSTED_ENV not in env:
        return False
    word = env[UNTRUSTED_ENV].strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise UsageError(
        f"{UNTRUSTED_ENV}={env[UNTRUSTED_ENV]!r} is neither true nor false",
        hint=f"set it to one of {', '.join(TRUE_WORDS)} (untrusted) or "
        f"{', '.join(FALSE_WORDS)} (trusted); rocmenv never guesses trusted",
    )


def untrusted_mode(profile: Profile, flag: bool, env: Mapping[str, str]) -> bool:
    """Any source switches untrusted mode on (``--untrusted``, the profile's ``untrusted =
    true``, ``ROCMENV_UNTRUSTED``); none switches it off."""
    return flag or profile.untrusted or untrusted_env(env)


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What an untrusted container may have beyond the fixed rules (module docstring)."""

    source: str = "built-in"
    cap_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ("video", "render")
    devices: tuple[str, ...] = ()  # host device nodes beyond /dev/kfd and the GPUs'
    network: tuple[str, ...] = ("bridge", "default", "none")
    images: tuple[str, ...] = ()  # empty: the trusted config's repositories, else rocm/sgl-dev
    mount_sources: tuple[str, ...] = ()  # non-empty: data mounts must lie under one of these
    pass_env: tuple[str, ...] = ()  # host variables an untrusted profile may still pass


DEFAULT_POLICY: Final = Policy()


def load_policy(env: Mapping[str, str], checkout: Path | None) -> Policy:
    """The built-in policy, or the TOML file ``ROCMENV_POLICY`` names (outside the checkout)."""
    name = env.get(POLICY_ENV, "").strip()
    if not name:
        return DEFAULT_POLICY
    path = Path(name)
    if not path.is_absolute():
        raise ConfigError(
            f"{POLICY_ENV}={name!r} is not an absolute path",
            hint="name the policy file by an absolute path outside the checkout",
        )
    if checkout is not None and _under(os.path.realpath(path), os.path.realpath(checkout)):
        raise ConfigError(
            f"{POLICY_ENV}={name} is inside the checkout {checkout}: in an untrusted job that "
            "file is the pull request's, not yours",
            hint="keep the policy file outside the checkout (e.g. /etc/rocmenv/policy.toml)",
        )
    from rocmenv.settings.profiles import as_str_list, check_keys
    from rocmenv.settings.project import load_toml

    table = load_toml(path)
    where = f"policy file {path}"
    check_keys(table, POLICY_KEYS, where)
    values: dict[str, Any] = {}
    for key in POLICY_KEYS:
        if key in table:
            values[key.replace("-", "_")] = as_str_list(table[key], f"{key} in {where}")
    if "images" in values:
        values["images"] = tuple(_repository(i, f"images in {where}") for i in values["images"])
    return Policy(source=str(path), **values)


def _repository(text: str, where: str) -> str:
    from rocmenv.errors import InvalidReference
    from rocmenv.grammar.reference import parse_repository

    try:
        return parse_repository(text).name
    except InvalidReference as err:
        raise ConfigError(f"{where}: {err.what}", hint=err.hint) from None


@dataclass(frozen=True, kw_only=True)
class Guard:
    """The policy as it applies to one run: which config is trusted, which images."""

    policy: Policy = DEFAULT_POLICY
    config_trusted: bool = False  # the profile came from a config outside the checkout
    images: tuple[str, ...] = (BUILTIN_REPOSITORY,)  # allowed repositories (domain/path)
    mirrors: tuple[tuple[str, str], ...] = ()  # trusted (registry, mirror host) pairs
    config_notes: tuple[str, ...] = ()  # what loading ignored from the checkout's config

    def trusts(self, profile: Profile) -> bool:
        return profile.source == "built-in" or self.config_trusted

    def constrain(self, profile: Profile) -> tuple[Profile, list[str]]:
        """The profile with what untrusted mode neutralises replaced; what changed."""
        changed: list[str] = []
        updates: dict[str, Any] = {}
        if profile.gpu_isolation != "devices":
            updates["gpu_isolation"] = "devices"
            changed.append("gpu-isolation env -> devices")
        if set(profile.gpu_env) != set(VISIBLE_DEVICE_VARS):
            updates["gpu_env"] = VISIBLE_DEVICE_VARS
        if profile.ipc == "host":
            updates["ipc"] = "private"
            changed.append(f"ipc host -> private /dev/shm ({profile.shm_size or 'default'})")
        caps = [c for c in profile.cap_add if _norm_cap(c) in REFERENCE_CAPS and not
                self._cap_allowed(c)]  # fmt: skip
        if caps:
            updates["cap_add"] = tuple(c for c in profile.cap_add if c not in caps)
            changed.append(f"cap-add {','.join(caps)} dropped")
        opts = [o for o in profile.security_opt
                if o in REFERENCE_SECURITY_OPTS and o not in self.policy.security_opt]  # fmt: skip
        if opts:
            updates["security_opt"] = tuple(o for o in profile.security_opt if o not in opts)
            changed.append(f"security-opt {','.join(opts)} dropped")
        if not self.trusts(profile):
            dropped = [n for n in profile.pass_env if n not in self.policy.pass_env]
            if dropped:
                updates["pass_env"] = tuple(n for n in profile.pass_env if n not in dropped)
                changed.append(f"pass-env {','.join(dropped)} not passed")
            if profile.keep_proxy_env:
                updates["keep_proxy_env"] = False
                changed.append("keep-proxy-env ignored")
        return (replace(profile, **updates) if updates else profile), changed

    def _cap_allowed(self, cap: str) -> bool:
        return _norm_cap(cap) in {_norm_cap(c) for c in self.policy.cap_add}

    def check(
        self,
        profile: Profile,
        *,
        devices: Sequence[Device],
        gpu_devices: Sequence[Device],
        group_gid: Callable[[str], int | None],
        mounts: Sequence[BindMount],
        checkout: str | None,
        image: str,
        network: str | None,
        ipc: str | None,
        env: Mapping[str, str],
        realpath: Callable[[str], str],
        find_socket: Callable[[str], str | None],
    ) -> None:
        """Raise :class:`PolicyViolation` listing every key of the built spec the policy
        refuses."""
        where = f"profile {profile.name!r} ({profile.source})"
        bad: list[str] = []

        def refuse(key: str, value: str, rule: str) -> None:
            bad.append(f"{key} = {value!r}: {rule}")

        allowed_devices = {d.host for d in gpu_devices} | set(self.policy.devices)
        for dev in devices:
            if dev.host not in allowed_devices:
                refuse("devices", dev.host, "only /dev/kfd and the selected GPUs' nodes")
        for cap in profile.cap_add:
            if not self._cap_allowed(cap):
                refuse("cap-add", cap, "no added capabilities")
        for opt in profile.security_opt:
            if opt not in self.policy.security_opt and opt not in SAFE_SECURITY_OPTS:
                refuse(
                    "security-opt",
                    opt,
                    "no unconfined or custom security options (no-new-privileges only)",
                )
        if network is not None and network not in self.policy.network:
            refuse("network", network, "no host or container network namespace")
        if ipc is not None and ipc not in PRIVATE_IPC:
            refuse("ipc", ipc, "no host or container IPC namespace")
        allowed_gids = {str(g) for g in map(group_gid, self.policy.group_add) if g is not None}
        never = {*NEVER_GROUPS, *(str(g) for g in map(group_gid, NEVER_GROUPS) if g is not None)}
        for group in profile.group_add:
            if group in never:
                refuse("group-add", group, "never a root-equivalent group, whatever the policy")
            elif group not in self.policy.group_add and group not in allowed_gids:
                refuse(
                    "group-add",
                    group,
                    f"only {'/'.join(self.policy.group_add)} (the GPU nodes' groups)",
                )
        for mount in mounts:
            if mount.target == checkout:
                problem = _checkout_problem(realpath(mount.source), env)
                if problem:
                    refuse("the checkout (the working directory's git top level)",
                           mount.source, problem)  # fmt: skip
                continue
            problem = self._mount_problem(mount.source, checkout, env, realpath, find_socket)
            if problem:
                refuse("mounts", f"{mount.source}:{mount.target}", problem)
        problem = self._image_problem(image)
        if problem:
            refuse("image", image, problem)
        if bad:
            raise PolicyViolation(
                f"untrusted mode: the policy ({self.policy.source}) refuses {where}: "
                + "; ".join(bad),
                hint=RULE_HINT,
            )

    def _mount_problem(
        self,
        source: str,
        checkout: str | None,
        env: Mapping[str, str],
        realpath: Callable[[str], str],
        find_socket: Callable[[str], str | None],
    ) -> str | None:
        real = realpath(source)
        paths = {os.path.normpath(source), real}
        if checkout is not None:
            real_checkout = realpath(checkout)
            if all(_under(p, real_checkout) or _under(p, checkout) for p in paths):
                return None  # inside the checkout: the job's own files (read-only)
        for path in paths:
            if path.endswith(".sock"):
                return "no sockets"
            sock = find_socket(path)
            if sock is not None:
                return "no sockets" + (f" ({sock} is one)" if sock != path else "")
            for sock in engine_sockets(env):
                if _under(sock, path):
                    return f"no mount of the engine's socket {sock} or a directory holding it"
            if path in FORBIDDEN_EXACT:
                return "not the host's root or a system directory"
            for root in FORBIDDEN_ROOTS:
                if _under(path, root) or _under(root, path):
                    return f"nothing of {root}"
            if checkout is not None and (
                _under(checkout, path) or _under(realpath(checkout), path)
            ):
                return "no directory containing the checkout"
            for work in runner_dirs(env):
                if _under(path, work) or _under(work, path):
                    return f"nothing of the runner's work directory {work} outside the checkout"
        if self.policy.mount_sources and not any(
            _under(real, root) for root in self.policy.mount_sources
        ):
            return f"data mounts only from {', '.join(self.policy.mount_sources)}"
        return None

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


def _checkout_problem(path: str, env: Mapping[str, str]) -> str | None:
    """The checkout is mounted writable: it may lie in ``/home`` (runners do), but must not
    be ``/``, a system directory, or hold one, the engine's socket or the runner's work
    directories (run from the checkout, not from above it)."""
    holds = [*FORBIDDEN_ROOTS, *engine_sockets(env), *runner_dirs(env)]
    if path in FORBIDDEN_EXACT or any(_under(p, path) for p in holds):
        return "not / or a directory holding system paths, the engine's socket or the runner"
    return None


def _norm_cap(cap: str) -> str:
    cap = cap.strip().upper()
    return cap[4:] if cap.startswith("CAP_") else cap


def _under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it (both absolute, compared as normalised paths)."""
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def engine_sockets(env: Mapping[str, str]) -> tuple[str, ...]:
    """The engine's socket path(s): ``DOCKER_HOST=unix://…`` and the usual places."""
    found = list(ENGINE_SOCKETS)
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        found.insert(0, host[len("unix://") :])
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        found += [f"{runtime}/docker.sock", f"{runtime}/podman/podman.sock"]
    return tuple(found)


def runner_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """The CI runner's work directories (GitHub Actions names them in the environment)."""
    out = []
    if env.get("RUNNER_WORKSPACE", "").startswith("/"):
        out.append(os.path.dirname(os.path.normpath(env["RUNNER_WORKSPACE"])))
    for name in ("RUNNER_TEMP", "RUNNER_TOOL_CACHE"):
        if env.get(name, "").startswith("/"):
            out.append(env[name])
    return tuple(out)


def find_socket(path: str, limit: int = SOCKET_SCAN_LIMIT) -> str | None:
    """``path`` if it is a socket, else a socket among the first ``limit`` entries of the
    directory tree under it (a read-only bind of a socket still accepts ``connect()``).
    Symlinks are not followed: inside the container they resolve in the container."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            return path
    except OSError:
        return None
    stack, seen = [path], 0
    while stack and seen < limit:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif (
                        not entry.is_file(follow_symlinks=False)
                        and not entry.is_symlink()
                        and stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
                    ):
                        return entry.path
        except OSError:
            continue
    return None


def guard_for(env: Mapping[str, str], config: Config, checkout: Path | None) -> Guard:
    """The guard of one run: the policy (``ROCMENV_POLICY`` or built-in), the allowed images
    (the policy's, else those the trusted config names, else ``rocm/sgl-dev``) and the
    trusted registry mirrors that may serve them (the checkout's were not loaded)."""
    policy = load_policy(env, checkout)
    images = policy.images
    if not images and config.trusted:
        images = tuple(
            dict.fromkeys(
                _repository(p.image.repository, f"[profiles.{p.name}].image")
                for _name, p in config.profiles
                if p.image is not None
            )
        )
    registry = config.registry
    if not config.trusted:  # the checkout's file was read (untrusted = true in a profile)
        from rocmenv.settings.registry import RegistrySettings, env_registry

        registry = env_registry(env, RegistrySettings())
    mirrors = tuple((reg, host) for reg, hosts in registry.mirrors for host in hosts)
    return Guard(
        policy=policy,
        config_trusted=config.trusted,
        images=images or (BUILTIN_REPOSITORY,),
        mirrors=mirrors,
        config_notes=config.notes,
    )
