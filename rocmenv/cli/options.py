"""``rocmenv options --format docker|gha|compose|sbatch [--profile P] [--gpus …]``.

``sbatch`` renders a Slurm batch script asking for as many GPUs as ``--gpus`` names, whose
``rocmenv run --gpus slurm`` gives the container exactly the GPUs Slurm allocates.

``docker`` renders for this host (absent optional mounts are left out, as ``run`` does),
so ``docker run $(rocmenv options --format docker) IMAGE CMD`` makes the container ``rocmenv
run`` makes (without the shim launcher) — untrusted, with the checkout read-only where
``run`` gives a copy-on-write view the arguments cannot create (said on stderr). ``gha`` and ``compose`` render for another host
(every mount kept, ``--gpus all`` as ``/dev/kfd`` + ``/dev/dri``); ``--host-check`` /
``--no-host-check`` override that.
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context

DESCRIPTION = (
    "Render the profile's container options. docker: for this host (docker run $(rocmenv "
    "options) IMAGE CMD makes the container rocmenv run makes, minus the shim launcher); "
    "gha and compose: for another host (every mount kept, group names, --gpus all as "
    "/dev/kfd + /dev/dri)."
)


#: What the renderings cannot say of an untrusted container (rocmenv.container.render).
OVERLAY_NOTE = (
    "the checkout is rendered read-only here: `rocmenv run` gives an untrusted container a "
    "copy-on-write view of it (scratch volumes it creates and removes), which these options "
    "cannot create"
)
OVERLAY_GHA = (
    "a GitHub `container:` job mounts the runner's work directory writable itself, and no "
    "container.options can change that: run a fork's code with `rocmenv run` or `rocmenv "
    "suite run`, whose untrusted container sees a copy-on-write view of the checkout"
)


def add_parser(sub: Any, name: str, help_text: str) -> None:
    from rocmenv.cli.run import add_container_args

    parser = sub.add_parser(name, help=help_text, description=DESCRIPTION)
    parser.add_argument(
        "--format", choices=("docker", "gha", "compose", "sbatch"), default="docker",
        help="sbatch: a Slurm batch script whose container gets exactly the allocated GPUs",
    )  # fmt: skip
    add_container_args(parser)
    parser.add_argument(
        "--host-check", action=argparse.BooleanOptionalAction, default=None,
        help="check devices/mount sources on this host (default: only for --format docker)",
    )  # fmt: skip
    parser.add_argument(
        "--group-names", action="store_true",
        help="keep group names, not this host's GIDs (the default for gha/compose)",
    )  # fmt: skip
    parser.add_argument("--service", metavar="NAME", help="compose service name (default: profile)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json, warn
    from rocmenv.cli.run import flags_of
    from rocmenv.container.labels import LABEL_PREFIX
    from rocmenv.container.plan import PlanRequest, plan
    from rocmenv.container.render import plain_words, render_compose, render_docker, render_gha
    from rocmenv.container.runspec import Overrides
    from rocmenv.errors import UsageError
    from rocmenv.settings.profile_set import PROFILE_NAME_RE
    from rocmenv.settings.resolve import settings_for

    settings = settings_for(ctx, flags_of(args))
    profile = settings.profile
    if args.format == "sbatch":
        return _sbatch(args, ctx, settings)
    check_host = args.host_check if args.host_check is not None else args.format == "docker"
    overrides = Overrides(
        image=args.image, gpus=args.gpus, env=tuple(args.env), mounts=tuple(args.volume),
        workdir=args.workdir,
    )  # fmt: skip
    request = PlanRequest(
        overrides=overrides, for_this_host=check_host, group_names=args.group_names,
        needs_image=False, resolve_constraints=False,
    )  # fmt: skip
    planned = plan(ctx, settings, request)
    spec = planned.spec
    image = planned.image.image if planned.image is not None else None
    for text in spec.warnings:
        warn(ctx, text)
    for text in spec.notes:
        ctx.stderr.write(f"rocmenv: {text}\n")
    if any(m.kind == "overlay" for m in spec.mounts):
        warn(ctx, OVERLAY_GHA if args.format == "gha" else OVERLAY_NOTE)
    if args.format == "docker":
        argv = [a for a in render_docker(spec) if not a.startswith(f"--label={LABEL_PREFIX}")]
        if args.json:  # a list: any value
            emit_json(
                ctx, {"format": "docker", "profile": profile.name, "args": argv, "image": image}
            )
        else:  # words for $(…): nothing that would need quoting
            emit(ctx, plain_words(argv, "docker"))
    elif args.format == "gha":
        text = render_gha(spec)
        if args.json:
            emit_json(
                ctx, {"format": "gha", "profile": profile.name, "options": text, "image": image}
            )
        else:
            emit(ctx, text)
    else:
        if image is None:
            warn(
                ctx,
                f"profile {profile.name!r} names no image: the service says IMAGE (use --image)",
            )
        if args.service is not None and not PROFILE_NAME_RE.fullmatch(args.service):
            raise UsageError(
                f"--service {args.service!r} is not a service name",
                hint="use letters, digits, '.', '_' and '-', starting with a letter or digit",
            )
        text = render_compose(spec, service=args.service)
        if args.json:
            emit_json(ctx, {"format": "compose", "profile": profile.name, "yaml": text})
        else:
            ctx.stdout.write(text)
    return 0


def _sbatch(args: argparse.Namespace, ctx: Context, settings: Any) -> int:
    """A Slurm batch script whose ``rocmenv run --gpus slurm`` gets the allocated GPUs."""
    from rocmenv.cli._common import emit_json
    from rocmenv.cli.run import node_run_args
    from rocmenv.suite.slurm import gpu_count, render_sbatch

    profile = settings.profile.name
    for note in settings.notes:  # what untrusted mode did not read from the checkout
        ctx.stderr.write(f"rocmenv: untrusted mode: {note}\n")
    count = gpu_count(ctx, args.gpus or settings.profile.gpus)
    node_args = node_run_args(args, untrusted=settings.untrusted)
    if "--profile" not in node_args:
        node_args += ["--profile", profile]
    text = render_sbatch(
        ctx, settings.slurm, count=count, profile=profile, node_args=[*node_args, "--"]
    )
    if args.json:
        emit_json(ctx, {"format": "sbatch", "profile": profile, "script": text})
    else:
        ctx.stdout.write(text)
    return 0
