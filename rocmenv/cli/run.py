"""``rocmenv run [OPTIONS] -- CMD…`` and ``rocmenv shell [OPTIONS]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from rocmenv.context import Context
from rocmenv.settings.choices import ENGINE_NAMES
from rocmenv.settings.resolve import Flags

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

PULL_CHOICES = ("always", "missing", "never")


def add_container_args(parser: Any) -> None:
    """Flags shared by run, shell and options."""
    parser.add_argument("--profile", metavar="NAME", help="profile (default: rocm)")
    parser.add_argument("--image", metavar="REF", help="image reference (overrides the lock)")
    parser.add_argument(
        "--gpus",
        metavar="SEL",
        help="all | none | 0,1 | 0-3 | GPU-<uuid> | PCI address | /dev/dri/renderD128,… "
        "(within this runner's pool: rocmenv gpus)",
    )
    parser.add_argument(
        "-e", "--env", action="append", default=[], metavar="K[=V]",
        help="set a variable (K alone: take it from this environment)",
    )  # fmt: skip
    parser.add_argument(
        "-v", "--volume", action="append", default=[], metavar="SRC:DST[:ro]",
        help="bind-mount SRC (must exist) at DST",
    )  # fmt: skip
    parser.add_argument("-w", "--workdir", metavar="DIR", help="working directory in the container")
    parser.add_argument(
        "--untrusted", action="store_true",
        help="code from an untrusted source (a fork's PR): the container must satisfy the "
        "untrusted policy (README \"Running untrusted code\"); ROCMENV_UNTRUSTED=1 does the same",
    )  # fmt: skip


def add_parser(sub: Any, name: str, help_text: str) -> None:
    shell = name == "shell"
    parser = sub.add_parser(name, help=help_text, description=help_text)
    add_container_args(parser)
    parser.add_argument("--pull", choices=PULL_CHOICES, help="pull policy (default: the profile's)")
    parser.add_argument("--engine", choices=ENGINE_NAMES, help="container engine (default: auto)")
    parser.add_argument("--keep", action="store_true", help="keep the container afterwards")
    parser.add_argument("--no-shims", action="store_true", help="don't inject the shim launcher")
    parser.add_argument(
        "-t", "--tty", action=argparse.BooleanOptionalAction, default=None,
        help="allocate a terminal of this terminal's size (default: when stdin and stdout "
        "are terminals)",
    )  # fmt: skip
    if not shell:
        parser.add_argument("-i", "--interactive", action="store_true", help="attach stdin")
        parser.add_argument(
            "--output", "-o", metavar="PATH", type=Path,
            help="copy the container's output directory ($ROCMENV_OUTPUT, the profile's "
            "output) into the directory PATH after the command: regular files only, modes 0644/0755",
        )  # fmt: skip
        parser.add_argument(
            "--backend", choices=("local", "slurm"), default="local",
            help="slurm: a Slurm job asking for as many GPUs as --gpus names; its container "
            "gets exactly the GPUs allocated (on the node: --gpus slurm)",
        )  # fmt: skip
        parser.add_argument(
            "command", nargs=argparse.REMAINDER, metavar="-- CMD",
            help="the command (default: the image's)",
        )  # fmt: skip
    parser.set_defaults(func=run, shell=shell)


def flags_of(args: argparse.Namespace) -> Flags:
    """The settings the command line gives (the rest cascade: :mod:`rocmenv.settings.resolve`)."""
    return Flags(
        profile=args.profile,
        engine=getattr(args, "engine", None),
        pull=getattr(args, "pull", None),
        shims=False if getattr(args, "no_shims", False) else None,
        untrusted=args.untrusted,
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli import resume_collection
    from rocmenv.container.runspec import Overrides
    from rocmenv.run.execute import RunRequest, execute

    command = list(getattr(args, "command", None) or [])
    if command and command[0] == "--":
        command = command[1:]
    args.output = output_dir(ctx, getattr(args, "output", None))
    gpus = args.gpus
    if getattr(args, "backend", "local") == "slurm":
        from rocmenv.run.interrupt import pending
        from rocmenv.settings.resolve import settings_for
        from rocmenv.suite.slurm import gpu_count, run_as_job

        if (signum := pending()) is not None:  # interrupted before there was a job
            return 128 + signum
        settings = settings_for(ctx, flags_of(args))
        for note in settings.notes:  # what untrusted mode did not read from the checkout
            CliReporter(ctx).note(f"untrusted mode: {note}")
        count = gpu_count(ctx, gpus or settings.profile.gpus)
        node_args = [*node_run_args(args, untrusted=settings.untrusted), "--", *command]
        resume_collection()
        return run_as_job(
            ctx, settings.slurm, count=count, node_args=node_args, untrusted=settings.untrusted
        )
    if gpus == "slurm":  # inside a Slurm job: exactly the GPUs it was allocated
        from rocmenv.settings.resolve import settings_for
        from rocmenv.suite.allocation import allocated_gpus, describe

        node = allocated_gpus(ctx, settings_for(ctx, flags_of(args)))
        CliReporter(ctx).note(f"Slurm allocation: {describe(node)}")
        gpus = ",".join(str(i) for i in node.host) or "none"
    request = RunRequest(
        flags=flags_of(args),
        overrides=Overrides(
            image=args.image,
            command=tuple(command),
            gpus=gpus,
            env=tuple(args.env),
            mounts=tuple(args.volume),
            workdir=args.workdir,
        ),
        keep=args.keep,
        interactive=bool(getattr(args, "interactive", False)),
        tty=args.tty,
        shell=args.shell,
        output=args.output,
    )
    return execute(ctx, request, CliReporter(ctx), on_created=resume_collection)


def output_dir(ctx: Context, given: Path | None) -> Path | None:
    """``--output DIR`` as an absolute path (relative: to the working directory)."""
    if given is None:
        return None
    return given if given.is_absolute() else ctx.cwd / given


def node_run_args(args: argparse.Namespace, *, untrusted: bool = False) -> list[str]:
    """``rocmenv run`` arguments that reproduce these flags on a Slurm node (``--gpus slurm``);
    ``--untrusted`` whenever the run is (``untrusted``: the resolved setting, whatever switched
    it on — the node need not see this environment)."""
    out = ["run", "--gpus", "slurm"]
    for flag, value in (("--profile", args.profile), ("--image", args.image),
                        ("--workdir", args.workdir), ("--pull", getattr(args, "pull", None)),
                        ("--engine", getattr(args, "engine", None))):  # fmt: skip
        if value:
            out += [flag, value]
    for item in args.env:
        out += ["--env", item]
    for item in args.volume:
        out += ["--volume", item]
    if getattr(args, "output", None) is not None:  # absolute (run): a directory nodes share
        out += ["--output", str(args.output)]
    for flag, on in (("--untrusted", args.untrusted or untrusted),
                     ("--keep", getattr(args, "keep", False)),
                     ("--no-shims", getattr(args, "no_shims", False))):  # fmt: skip
        if on:
            out.append(flag)
    return out


class CliReporter:
    """Notes and warnings on stderr; pulls through :func:`rocmenv.run.progress.pull_with_display`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def note(self, text: str) -> None:
        from rocmenv.escape import shown
        from rocmenv.redact import redact

        self.ctx.stderr.write(f"rocmenv: {shown(redact(text), lines=True)}\n")

    def warning(self, text: str) -> None:
        from rocmenv.cli._common import warn

        warn(self.ctx, text)

    def pull(self, settings: Any, engine: Any, image: str) -> object:
        from rocmenv.cli import resume_collection
        from rocmenv.run.progress import pull_with_display

        resume_collection()  # a pull may take minutes: start-up is over

        return pull_with_display(self.ctx, settings, engine, image)
