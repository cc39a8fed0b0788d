"""Command-line entry point.

Start-up is kept cheap: only the module of the command being run is imported (the others
are registered by name and help text), and heavy libraries are imported inside commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rocmenv import __version__
from rocmenv.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RocmenvError

if TYPE_CHECKING:
    from rocmenv.context import Context

__all__ = ["COMMANDS", "build_parser", "main"]

# name -> (module under rocmenv.cli, one-line help). Order is the order of `--help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "ref": ("ref", "parse and normalise image references"),
    "tags": ("tags", "parse tags, list a repository's tags"),
    "resolve": ("resolve", "find the newest tag matching constraints"),
    "pin": ("pin", "pin profiles or references to digests in rocmenv.lock"),
    "validate": ("validate", "check a reference or profile against the registry and the lock"),
    "run": ("run", "run a command in the profile's container"),
    "shell": ("run", "open an interactive shell in the profile's container"),
    "pull": ("pull", "pull the profile's locked image with progress, retries and a disk check"),
    "options": ("options", "render the profile's container options for docker/gha/compose"),
    "gpus": ("gpus", "list the host's AMD GPUs"),
    "shims": ("shims", "list shims, check which apply in an image"),
    "bootstrap": ("bootstrap", "prepare a CI job container (GPU, stale processes, shims)"),
    "inspect": ("inspect", "what is inside an image, read from the registry without pulling"),
    "diff": ("inspect", "compare two images' packages, ROCm, Python and shims without pulling"),
    "drift": ("drift", "report what moved behind pinned tags"),
    "gc": ("gc", "remove containers whose rocmenv owner is gone, and unused pulled images"),
    "doctor": ("doctor", "check the engine, registry access and configuration"),
    "suite": ("suite", "list, plan and run test suites across GPU slots (local or Slurm)"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        from rocmenv.redact import redact

        self.print_usage(sys.stderr)
        sys.stderr.write(f"rocmenv: error: {redact(message)}\nhint: see `{self.prog} --help`\n")
        raise SystemExit(EXIT_USAGE)


def _command_in(argv: Sequence[str]) -> str | None:
    skip_next = False
    for arg in argv:
        if skip_next:
            skip_next = False
            continue
        if arg in ("--config",):
            skip_next = True
            continue
        if arg.startswith("-"):
            continue
        return arg if arg in COMMANDS else None
    return None


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rocmenv",
        description="Reproducible ROCm container environments for CI and developers.",
        epilog="Exit codes: 0 ok, 1 check failed, 2 usage/config error, 3 registry error, "
        "4 engine error; run/shell return the command's own code (125: not started).",
    )
    parser.add_argument("--version", action="version", version=f"rocmenv {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--config", metavar="FILE", help="rocmenv.toml or pyproject.toml to use")
    sub = parser.add_subparsers(dest="rocmenv_command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        if command is not None and name != command:
            continue  # each sub-parser costs ~1-2 ms to build: only the one being run
        if name == command:
            try:
                module = importlib.import_module(f"rocmenv.cli.{module_name}")
            except ModuleNotFoundError as err:
                if err.name != f"rocmenv.cli.{module_name}":
                    raise
                sys.stderr.write(f"rocmenv: the {name!r} command is not part of this build\n")
                raise SystemExit(EXIT_USAGE) from None
            module.add_parser(sub, name, help_text)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None, *, ctx: Context | None = None) -> int:
    """Run one command; ``ctx`` (tests, embedding) replaces the process's environment,
    working directory and streams (``--debug``/``--config`` still come from ``argv``)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(args_in)
    if command in ("run", "shell"):  # from here on a signal is the run's (rocmenv.run.interrupt)
        from rocmenv.run.interrupt import SignalWatch

        with SignalWatch(until_exit=argv is None):  # the program: to its very end
            return _main(args_in, command, ctx)
    return _main(args_in, command, ctx)


def _main(args_in: list[str], command: str | None, ctx: Context | None) -> int:
    parser = build_parser(command)
    args = parser.parse_args(args_in)
    if args.rocmenv_command is None:
        parser.print_help()
        return EXIT_USAGE
    from pathlib import Path

    from rocmenv.cli._common import report_error
    from rocmenv.context import Context

    config_path = Path(args.config) if args.config else None
    if ctx is None:
        ctx = Context(debug=args.debug, config_path=config_path)
    else:
        import dataclasses

        ctx = dataclasses.replace(ctx, debug=args.debug, config_path=config_path)
    try:
        return int(args.func(args, ctx))
    except RocmenvError as err:
        return report_error(
            ctx,
            err,
            command=args.rocmenv_command,
            as_json=bool(getattr(args, "json", False)) or getattr(args, "format", None) == "json",
        )
    except KeyboardInterrupt:
        ctx.stderr.write("rocmenv: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader closed stdout (`| head`): it has what it wanted
        import contextlib
        import os

        with contextlib.suppress(OSError, ValueError):  # no second error when Python flushes
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as err:  # a bug: one redacted paragraph, the traceback only with --debug
        from rocmenv.cli._common import report_internal_error

        return report_internal_error(ctx, err, command=args.rocmenv_command)
    return EXIT_INTERNAL  # not reached (for type checkers)
