"""Building the complete container: :func:`build_runspec` turns (profile, CLI overrides, host
GPU inventory, host facts, the shim launcher) into a frozen :class:`~rocmenv.container.runspec.RunSpec`
— labels and launcher included; nothing patches it afterwards. The same spec is what
``rocmenv run`` gives the engine and what ``rocmenv options`` renders (:mod:`rocmenv.container.render`).

Policies (docs/configuration.md):

* **GPUs.** ``--gpus all`` passes ``/dev/kfd`` and the whole ``/dev/dri`` (as the
  reference CI does); a subset passes ``/dev/kfd`` plus exactly the selected ``renderD*``
  and ``card*`` nodes. With ``gpu-isolation = "env"`` every node is passed and the
  ``gpu-env`` variables (default ``HIP_VISIBLE_DEVICES``) carry the host indices; with
  ``devices`` (default) they carry the container's own numbering ``0..k-1``.
* **Groups.** A ``group-add`` name that exists on the host is passed as the host's numeric
  GID: device nodes keep their host group inside the container, so that number is what
  the kernel checks (the image may lack the name, or map it to another GID). Names the
  host lacks are passed by name for the engine to resolve in the image.
* **Mounts** are bind mounts that never create their source: a missing source is an
  error unless the mount is ``optional`` (then skipped with a note). Rendered for another
  host (``options --format gha|compose``), whose paths this host cannot check, an optional
  mount keeps ``-v`` semantics instead (``create_source``: the engine creates an absent
  source, as the reference CI's ``-v`` does): left out, it would be missing on the runner
  that has the data. The checkout (git top level of the working directory, else the
  directory) is mounted at the same path and the working directory is the current one.
* **Environment**: only what the profile declares; proxy variables are dropped unless
  ``keep-proxy-env``; ``secret-env`` is never passed in untrusted mode.
* **Untrusted mode** is not this module's: the planner (:mod:`rocmenv.container.plan`) hands
  this trusted draft to the guard (:mod:`rocmenv.container.guard`), which constrains it or
  refuses it in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from rocmenv.container.gpu import (
    CONTAINER_DRI,
    CONTAINER_KFD,
    VISIBLE_DEVICE_VARS,
    Gpu,
    GpuSelection,
    parse_gpus,
    select,
)
from rocmenv.container.labels import LABEL_PREFIX, run_labels
from rocmenv.container.runspec import (
    OUTPUT_ENV,
    BindMount,
    Device,
    EnvVar,
    HostFacts,
    LauncherMount,
    Overrides,
    RunSpec,
    gpus_text,
    parse_device,
)
from rocmenv.errors import ConfigError, UsageError
from rocmenv.record import replace
from rocmenv.settings.profiles import PROXY_VARS, Mount, Profile, check_env_name, parse_mount

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from rocmenv.container.runspec import MountOrigin


def gpu_devices(
    selection: GpuSelection,
    host: HostFacts,
    *,
    isolation: str,
    env_names: tuple[str, ...],
    nodes_for_all: bool = False,
    naming: str = "nodes",
) -> tuple[list[Device], list[EnvVar], list[str]]:
    """Device nodes and visible-devices variables for a selection. ``isolation`` ``env``:
    every node, the variables carry host indices; ``devices``: only the selected GPUs' nodes,
    the variables carry the container's numbering. ``nodes_for_all``: even ``all`` as the
    GPUs' own nodes rather than the whole ``/dev/dri``. ``naming`` ``cdi``: the same choice
    as CDI names (``amd.com/gpu=2``, ``amd.com/gpu=all``; the spec brings ``/dev/kfd``).
    A selection from a pool narrower than the host (an ARC runner pod: :mod:`rocmenv.container.pool`)
    never passes the whole ``/dev/dri`` or ``amd.com/gpu=all``: "every node" is the pool's,
    and ``env`` isolation numbers the GPUs by their place in the pool."""
    if selection.kind == "none":
        return [], [], []
    inv = host.inventory
    pool = inv.pool if selection.restricted and inv is not None else None
    if naming == "cdi":
        return _cdi_devices(selection, isolation=isolation, env_names=env_names,
                            each_for_all=nodes_for_all, pool=pool)  # fmt: skip
    # Rendering for another host (no host check): that host's nodes are under /dev.
    dev_root = str(inv.dev_root) if inv is not None and host.check_host else "/dev"
    kfd = Device(host=f"{dev_root}/kfd", container=CONTAINER_KFD, gpu=True)
    notes: list[str] = []
    names = env_names or (("HIP_VISIBLE_DEVICES",) if isolation == "env" else ())

    def nodes(gpus: Sequence[Gpu]) -> list[Device]:
        out = []
        for gpu in sorted(gpus, key=lambda g: g.index):
            for node in (gpu.render_node, gpu.card_node):
                if node is not None:
                    source = str(node) if host.check_host else f"{dev_root}/dri/{node.name}"
                    out.append(
                        Device(host=source, container=f"{CONTAINER_DRI}/{node.name}", gpu=True)
                    )
            if gpu.card_node is None:
                notes.append(
                    f"GPU {gpu.index} ({gpu.pci_address}): no card node found, render node only"
                )
        return out

    by_nodes = (nodes_for_all or pool is not None) and selection.kind == "all"
    if (selection.kind == "all" and not (by_nodes and selection.gpus)) or isolation == "env":
        every = nodes(pool) if pool is not None else [
            Device(host=f"{dev_root}/dri", container=CONTAINER_DRI, gpu=True)
        ]  # fmt: skip
        if selection.kind == "subset":
            place = {g.index: i for i, g in enumerate(pool)} if pool is not None else None
            value = ",".join(str(g.index if place is None else place[g.index])
                             for g in selection.gpus)  # fmt: skip
            return [kfd, *every], [EnvVar(name=n, value=value, source="gpu") for n in names], notes
        return [kfd, *every], [], notes
    value = ",".join(str(i) for i in range(len(selection.gpus)))
    return (
        [kfd, *nodes(selection.gpus)],
        [EnvVar(name=n, value=value, source="gpu") for n in names],
        notes,
    )


def _cdi_devices(
    selection: GpuSelection,
    *,
    isolation: str,
    env_names: tuple[str, ...],
    each_for_all: bool,
    pool: tuple[Gpu, ...] | None,
) -> tuple[list[Device], list[EnvVar], list[str]]:
    """:func:`gpu_devices` as CDI names (:mod:`rocmenv.container.cdi`)."""
    from rocmenv.container.cdi import cdi_name

    def device(index: int | str) -> Device:
        name = cdi_name(index)
        return Device(host=name, container=name, gpu=True, cdi=True)

    names = env_names or (("HIP_VISIBLE_DEVICES",) if isolation == "env" else ())
    indices = sorted(g.index for g in selection.gpus)
    if pool is not None and isolation == "env":  # every GPU of the pool, numbered in it
        place = {g.index: i for i, g in enumerate(pool)}
        value = ",".join(str(place[g.index]) for g in selection.gpus)
        env = [EnvVar(name=n, value=value, source="gpu") for n in names]
        return [device(g.index) for g in pool], env if selection.kind == "subset" else [], []
    each_for_all = each_for_all or pool is not None
    if isolation == "env" or (selection.kind == "all" and not (each_for_all and indices)):
        if selection.kind == "subset":
            value = ",".join(str(g.index) for g in selection.gpus)
            return [device("all")], [EnvVar(name=n, value=value, source="gpu") for n in names], []
        return [device("all")], [], []
    value = ",".join(str(i) for i in range(len(indices)))
    return (
        [device(i) for i in indices],
        [EnvVar(name=n, value=value, source="gpu") for n in names],
        [],
    )


def gpu_selection(profile: Profile, overrides: Overrides, host: HostFacts) -> GpuSelection:
    text = gpus_text(profile, overrides)
    request = parse_gpus(text)
    inv = host.inventory
    if request.kind == "none":
        return GpuSelection(kind="none")
    if inv is None:
        if request.kind == "all":
            return GpuSelection(kind="all")
        raise UsageError(
            f"--gpus {text!r} names particular GPUs, which needs this host's GPU inventory",
            hint="render with --gpus all for another host, or run on the GPU host",
        )
    if host.check_host and not inv.kfd_present:
        raise UsageError(
            f"the profile {profile.name!r} wants GPUs (--gpus {text}) but {inv.kfd_node} does "
            "not exist: no AMD GPU driver (amdgpu/KFD) on this host",
            hint="use --gpus none or --profile cpu for a CPU-only run; "
            "check `rocmenv gpus` and that amdgpu is loaded",
        )
    return select(request, inv)


def _mounts(
    profile: Profile, overrides: Overrides, host: HostFacts
) -> tuple[list[BindMount], list[str], str | None]:
    notes: list[str] = []
    declared: list[tuple[Mount, str]] = [(m, "profile") for m in profile.mounts]
    for text in overrides.mounts:
        m = parse_mount(text, f"-v {text!r}", host.cwd, UsageError)
        declared = [(d, w) for d, w in declared if d.target != m.target]  # -v wins
        declared.append((m, "-v"))
    out: list[BindMount] = []
    skipped: list[str] = []
    by_target: dict[str, str] = {}
    checkout_target: str | None = None
    if host.checkout is not None and profile.mount_checkout:
        checkout_target = str(host.checkout)
        out.append(BindMount(source=checkout_target, target=checkout_target, origin="checkout"))
        by_target[checkout_target] = "the checkout"
    for mount, origin in declared:
        if host.check_host and not host.path_exists(mount.source):
            if mount.optional:
                skipped.append(mount.source)
                continue
            raise UsageError(
                f"mount source {mount.source} (-> {mount.target}, from {origin}) does not exist",
                hint="create it, fix the path, or mark the mount optional = true in the profile "
                "(Docker would silently create an empty root-owned directory)",
            )
        if mount.target in by_target:
            raise UsageError(
                f"two mounts target {mount.target}: {by_target[mount.target]} and {mount.source}",
                hint="give one of them another target",
            )
        by_target[mount.target] = mount.source
        kind: MountOrigin = "cli" if origin == "-v" else "profile"
        create = mount.optional and not host.check_host
        if create and ":" in mount.source + mount.target:
            raise UsageError(
                f"optional mount {mount.source} -> {mount.target} (from {origin}): a path "
                "holding ':' cannot be written as -v SRC:DST, which an optional mount "
                "rendered for another host needs (the engine creates an absent source)",
                hint="rename the path, or make the mount required (optional = false)",
            )
        out.append(
            BindMount(
                source=mount.source,
                target=mount.target,
                readonly=mount.readonly,
                origin=kind,
                create_source=create,
            )
        )
    if skipped:
        notes.append(f"optional mounts skipped, source absent: {', '.join(skipped)}")
    return out, notes, checkout_target


def with_gpu_env(
    env: list[EnvVar], gpu_env: list[EnvVar], *, renumbered: bool, selection: GpuSelection
) -> list[EnvVar]:
    """The selection's variables win: over the profile's and those passed through from the
    host (with ``devices`` isolation a passed ``HIP_VISIBLE_DEVICES=4,5,6,7`` would name GPUs
    the container numbers 0-3); only an explicit ``-e NAME=VALUE`` keeps its value."""
    names = {v.name for v in gpu_env}
    if renumbered and gpu_env:
        value = gpu_env[0].value
        for name in VISIBLE_DEVICE_VARS:
            if name not in names and any(e.name == name and e.source != "cli" for e in env):
                gpu_env = [*gpu_env, EnvVar(name=name, value=value, source="gpu")]
                names.add(name)
    elif renumbered:
        value = ",".join(str(i) for i in range(len(selection.gpus)))
        gpu_env = [
            EnvVar(name=e.name, value=value, source="gpu")
            for e in env
            if e.name in VISIBLE_DEVICE_VARS and e.source != "cli"
        ]
        names = {v.name for v in gpu_env}
    return [e for e in env if e.name not in names] + gpu_env


def _env(profile: Profile, overrides: Overrides, host: HostFacts) -> list[EnvVar]:
    env: dict[str, EnvVar] = {}
    for name, value in profile.env:
        env[name] = EnvVar(name=name, value=value, source="fixed")
    for name in profile.pass_env:
        env[name] = EnvVar(name=name, value=host.env.get(name), source="pass")
    for name in profile.secret_env:
        env[name] = EnvVar(name=name, value=host.env.get(name), source="secret")
    for item in overrides.env:
        name, eq, value = item.partition("=")
        check_env_name(name, f"-e {item!r}", UsageError)
        env[name] = EnvVar(
            name=name, value=value if eq else host.env.get(name), source="cli" if eq else "host"
        )
    if not profile.keep_proxy_env:
        for name in PROXY_VARS:
            env.pop(name, None)
    return list(env.values())


def _groups(profile: Profile, host: HostFacts) -> tuple[str, ...]:
    out: list[str] = []
    for group in profile.group_add:
        gid = None if group.isdigit() else host.group_gid(group)
        value = str(gid) if gid is not None else group
        if value not in out:
            out.append(value)
    return tuple(out)


def build_runspec(
    profile: Profile,
    overrides: Overrides,
    host: HostFacts,
    *,
    image: str,
    launcher: LauncherMount | None = None,
) -> RunSpec:
    """The complete container for ``profile`` with the CLI's ``overrides`` on ``host``, as a
    trusted profile asks for it: labels from :mod:`rocmenv.container.labels`, and the shim
    ``launcher`` mounted when given."""
    privileged = profile.privileged if overrides.privileged is None else overrides.privileged
    warnings: list[str] = []
    if privileged:
        warnings.append(
            f"profile {profile.name!r} runs the container privileged: it can access every "
            "host device and disable its own confinement"
        )
    selection = gpu_selection(profile, overrides, host)
    gpu_devs, gpu_env, notes = gpu_devices(
        selection, host, isolation=profile.gpu_isolation, env_names=profile.gpu_env,
        naming=profile.gpu_devices,
    )  # fmt: skip
    devices = gpu_devs + [
        parse_device(text, f"[profiles.{profile.name}].devices") for text in profile.devices
    ]
    mounts, mount_notes, checkout = _mounts(profile, overrides, host)
    renumbered = selection.kind == "subset" and profile.gpu_isolation == "devices"
    env = with_gpu_env(
        _env(profile, overrides, host), gpu_env, renumbered=renumbered, selection=selection
    )
    workdir = overrides.workdir or profile.workdir
    if workdir is None and checkout is not None:
        workdir = str(host.cwd)
    if workdir is not None and not workdir.startswith("/"):
        raise UsageError(f"--workdir {workdir!r} must be an absolute path in the container")
    if overrides.output:
        output = _output(profile, workdir, mounts)
        mounts.append(output)
        env = [e for e in env if e.name != OUTPUT_ENV]
        env.append(EnvVar(name=OUTPUT_ENV, value=output.target, source="fixed"))
    spec = RunSpec(
        image=image,
        command=tuple(overrides.command),
        profile=profile.name,
        devices=tuple(dedupe(devices)),
        group_add=_groups(profile, host),
        cap_add=profile.cap_add,
        cap_drop=profile.cap_drop,
        security_opt=profile.security_opt,
        ipc=profile.ipc,
        network=profile.network,
        shm_size=profile.shm_size,
        memory=profile.memory,
        memory_swap=profile.memory_swap,
        pids_limit=profile.pids_limit,
        ulimits=profile.ulimits,
        privileged=privileged,
        mounts=tuple(mounts),
        checkout=checkout,
        env=tuple(env),
        workdir=workdir,
        labels=_labels(profile, host),
        gpu_selection=selection,
        notes=tuple(notes + mount_notes),
        warnings=tuple(warnings),
    )
    return add_launcher(spec, launcher, host) if launcher is not None else spec


def _output(profile: Profile, workdir: str | None, mounts: list[BindMount]) -> BindMount:
    """The output directory ``--output`` copies out (:mod:`rocmenv.run.output`): an empty
    volume at the profile's ``output`` (relative: to the working directory)."""
    target = profile.output
    if not target.startswith("/"):
        if workdir is None:
            raise UsageError(
                f"profile {profile.name!r}: output = {target!r} is relative, and the container "
                "has no working directory",
                hint="give output an absolute path, or a workdir",
            )
        target = f"{workdir.rstrip('/')}/{target}"
    for mount in mounts:
        if mount.target == target:
            raise UsageError(
                f"two mounts target {target}: the output directory and {mount.source}",
                hint="give the profile's output another directory",
            )
    return BindMount(source="", target=target, kind="volume", origin="output")


def _labels(profile: Profile, host: HostFacts) -> tuple[tuple[str, str], ...]:
    labels = run_labels(
        profile=profile.name, identity=host.identity, image_digest=host.image_digest
    )
    for key, value in profile.labels:
        if key.startswith(LABEL_PREFIX):
            raise ConfigError(f"[profiles.{profile.name}].labels: {key!r} is reserved for rocmenv")
        labels[key] = value
    return tuple(sorted(labels.items()))


def check_devices(spec: RunSpec, host: HostFacts) -> None:
    """Every device node the spec passes exists on this host (when rendering for it)."""
    if not host.check_host:
        return
    for dev in spec.devices:
        if not dev.cdi and not host.path_exists(dev.host):
            raise UsageError(
                f"device {dev.host} (for {dev.container}) does not exist on this host",
                hint="check the profile's devices and `rocmenv gpus`",
            )


def add_launcher(spec: RunSpec, launcher: LauncherMount, host: HostFacts) -> RunSpec:
    """The spec with the shim launcher mounted read-only, first on ``PYTHONPATH`` (merged with
    the profile's or else the image's own), and a small private tmpfs on its ``__pycache__``:
    rocmenv's own mount, added after the guard has judged the rest."""
    from rocmenv.shims.bundle import merge_pythonpath

    given = {e.name: e.value for e in spec.env if e.value is not None}
    base = given.get("PYTHONPATH", host.image_env.get("PYTHONPATH"))
    pythonpath = merge_pythonpath(launcher.container_dir, base)
    env = [e for e in spec.env if e.name != "PYTHONPATH"]
    env.append(EnvVar(name="PYTHONPATH", value=pythonpath, source="launcher"))
    mounts = [m for m in spec.mounts if m.target != launcher.container_dir]
    own = BindMount(
        source=launcher.host_dir, target=launcher.container_dir, readonly=True, origin="launcher"
    )
    mounts.append(own)
    tmpfs = ((launcher.pycache_dir, "rw,size=1m"),) if launcher.pycache_dir else ()
    return replace(spec, env=tuple(env), mounts=tuple(mounts), tmpfs=tmpfs)


def dedupe(devices: Sequence[Device]) -> list[Device]:
    seen: set[str] = set()
    out: list[Device] = []
    for dev in devices:
        if dev.container not in seen:
            seen.add(dev.container)
            out.append(dev)
    return out
