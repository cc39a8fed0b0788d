"""Command-line entry point.

Start-up is kept cheap: only the module of the command being run is imported (the others
are registered by name and help text), and heavy libraries are imported inside commands.

Output starts here, so this is where the values of secret-looking environment variables
(:func:`looks_secret`) are registered for redaction, before anything is printed — and
nothing more is imported when there are none.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence

from rocmenv import __version__
from rocmenv.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RocmenvError

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from rocmenv.context import Context

__all__ = ["COMMANDS", "build_parser", "looks_secret", "main", "secret_env_values"]

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
    "cdi": ("cdi", "generate a CDI spec for the host's GPUs (amd.com/gpu=N)"),
    "shims": ("shims", "list shims, check which apply in an image"),
    "bootstrap": ("bootstrap", "prepare a CI job container (GPU, stale processes, shims)"),
    "inspect": ("inspect", "what is inside an image, read from the registry without pulling"),
    "diff": ("inspect", "compare two images' packages, ROCm, Python and shims without pulling"),
    "drift": ("drift", "report what moved behind pinned tags"),
    "gc": ("gc", "remove containers whose rocmenv owner is gone, and unused pulled images"),
    "cache": ("cache", "show and bound the runner image cache (status, prune)"),
    "doctor": ("doctor", "check the engine, registry access and configuration"),
    "config": ("config", "show every effective setting and its origin; the config's JSON Schema"),
    "completion": ("completion", "print the shell completion script (bash, zsh, fish)"),
    "suite": ("suite", "list, plan and run test suites across GPU slots (local or Slurm)"),
    "init": (
        "init",
        "write rocmenv.toml from a workflow's job container and the tests' registrations",
    ),
    "help": ("help", "show the help of a command: rocmenv help COMMAND [SUBCOMMAND]"),
}

#: Spellings an option had before it had one (issue 33): refused with the one it has now.
RENAMED: dict[str, str] = {"-p": "--profile"}


#: A variable is secret-looking when its name, upper-cased, contains one of these...
SECRET_NAME_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "_KEY",
                     "APIKEY")  # fmt: skip
#: ...or has one of these as a whole ``_``-separated word (GH_PAT; not PATH, PYTHONPATH, PATCH)
SECRET_NAME_WORDS = ("PAT",)
#: ...unless its last word is one of these: it names where a secret is (HF_TOKEN_PATH)
LOCATION_WORDS = ("PATH", "FILE", "DIR")


def looks_secret(name: str) -> bool:
    """Whether an environment variable's value is a secret, judged by its name (README
    "Secrets masked by value")."""
    upper = name.upper()
    words = upper.replace("-", "_").replace(".", "_").split("_")
    if words[-1] in LOCATION_WORDS:
        return False
    return any(w in SECRET_NAME_WORDS for w in words) or any(p in upper for p in SECRET_NAME_PARTS)


def secret_env_values(env: Mapping[str, str]) -> list[str]:
    """The values of the secret-looking variables of ``env`` (which of them can be a secret
    at all is :func:`rocmenv.redact.can_be_secret`'s call)."""
    return [value for name, value in env.items() if value and looks_secret(name)]


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, which argparse's formatter asks for — and every
    ``add_argument`` makes a formatter (to check the metavar): ``shutil`` costs a run ~3 ms
    (it imports ``bz2``, ``lzma``, ``fnmatch``). The same rule: ``COLUMNS``, else the
    terminal of ``sys.__stdout__``, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """Every help reads alike: plain text wrapped to the terminal's width. A description or
    epilog keeps its paragraphs (blank lines) and its indented lines (lists, tables, kept as
    written); the other lines of a paragraph are filled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # argparse passes keywords
        if kwargs.get("width") is None and len(args) < 4:
            kwargs["width"] = _terminal_columns() - 2  # what argparse does with shutil's
        super().__init__(*args, **kwargs)

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            _fill_block(block, width, indent) for block in text.strip("\n").split("\n\n")
        )


def _fill_block(block: str, width: int, indent: str) -> str:
    """One paragraph filled. An indented line starts an item of a list (``  1  text``), which
    the lines indented deeper continue, filled under its text; a line ending in ``:`` (a
    heading) stays a line of its own."""
    import re
    import textwrap

    lines: list[str] = []
    words: list[str] = []
    first = rest = indent  # the indents of the item being gathered
    in_item = False
    item_lead = 0

    def flush() -> None:
        if words:
            lines.extend(textwrap.wrap(" ".join(words), width, initial_indent=first,
                                       subsequent_indent=rest, break_on_hyphens=False))  # fmt: skip
            words.clear()

    for line in block.splitlines():
        lead = len(line) - len(line.lstrip())
        if (in_item and lead > item_lead) or (words and not in_item and not lead):
            words.append(line.strip())  # the item, or the paragraph, goes on
            continue
        flush()
        in_item, first, rest = False, indent, indent
        if lead:  # an item: its text hangs under itself, after a short marker
            marker = re.match(r"\s*\S{1,4}\s+", line)
            in_item, item_lead = True, lead
            first = indent + " " * lead
            rest = indent + " " * (len(marker.group()) if marker else lead + 2)
        words.append(line.strip())
        if not lead and line.endswith(":"):  # a heading
            flush()
    flush()
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """No prefix abbreviations (``--untr`` is not ``--untrusted``, ``--gpu`` not ``--gpus``),
    sub-parsers included; a usage error names the closest command or flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        """Each old spelling of an option this parser has (:data:`RENAMED`) is refused."""
        for old, new in RENAMED.items():
            if new in self._option_string_actions and old not in self._option_string_actions:
                self.add_argument(old, action=_Renamed, nargs="?", help=argparse.SUPPRESS)
        return super().parse_known_args(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        from rocmenv.redact import redact

        for hidden in self._hidden_commands():  # internal: never offered
            message = message.replace(f", {hidden!r}", "")
        self.print_usage(sys.stderr)
        sys.stderr.write(
            f"rocmenv: error: {redact(message)}{self._suggestion(message)}\n"
            f"hint: see `{self.prog} --help`\n"
        )
        raise SystemExit(EXIT_USAGE)

    def _hidden_commands(self) -> list[str]:
        """Subcommands added without a help line (``suite slurm-exec``): working, not listed."""
        out: list[str] = []
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                listed = {a.dest for a in action._choices_actions}
                out += [name for name in action.choices if name not in listed]
        return out

    def _suggestion(self, message: str) -> str:
        """ " (did you mean …?)" for an invalid choice or an unknown flag."""
        import difflib
        import re

        choice = re.search(r"invalid choice: '?([^'(]*?)'? \(choose from (.*)\)$", message)
        if choice:
            options = [c.strip().strip("'") for c in choice.group(2).split(",")]
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
            return f" (did you mean {close[0]!r}?)" if close else ""
        unknown = re.match(r"unrecognized arguments: (.*)$", message)
        if unknown:
            flags = _flags_of(self)
            own = {o for action in self._actions for o in action.option_strings}
            hints = []
            for arg in unknown.group(1).split():
                name = arg.split("=", 1)[0]
                close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
                if name in own:  # a global option given after the command
                    hints.append(
                        f"{name!r} is an option of rocmenv itself: give it before the "
                        f"command, `{self.prog} {name} COMMAND …`"
                    )
                elif name.startswith("-") and close:
                    hints.append(f"{name!r}: did you mean {close[0]!r}?")
            return f" ({'; '.join(hints)})" if hints else ""
        return ""


class _Renamed(argparse.Action):
    """An option's old spelling: a usage error naming the new one (exit 2), never kept."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        old = self.option_strings[0]
        parser.error(f"{old!r} is spelled {RENAMED[old]!r} now")


def _flags_of(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings of ``parser`` and its sub-parsers (only the command being run is
    built, so these are its flags and the global ones)."""
    flags = [o for action in parser._actions for o in action.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                flags += _flags_of(child)
    return flags


def completion_requested() -> bool:
    """The shell asks for completions (``rocmenv completion``'s script sets this)."""
    import os

    return "_ARGCOMPLETE" in os.environ


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


def build_parser(command: str | None, *, full: bool = False) -> argparse.ArgumentParser:
    """The parser for ``command`` (the others are named but not built); ``full``: every
    command's parser, for shell completion."""
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
        if command is not None and name != command and not full:
            continue  # each sub-parser costs ~1-2 ms to build: only the one being run
        if name == command or full:
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
    working directory and streams (``--debug``/``--config`` still come from ``argv``).
    The values of secret-looking variables in it are masked in everything the command
    prints or writes (in GitHub Actions, ``::add-mask::`` lines come first)."""
    if argv is None and completion_requested():
        from rocmenv.cli.completion import complete

        complete(build_parser(None, full=True))  # answers the shell, then exits
    env = ctx.env if ctx is not None else os.environ
    secrets = secret_env_values(env)
    if not secrets:  # nothing more to import
        return _run_command(argv, ctx)
    from rocmenv.cli._common import secrets_masked

    with secrets_masked(env, ctx.stderr if ctx is not None else sys.stderr, secrets):
        return _run_command(argv, ctx)


def _run_command(argv: Sequence[str] | None, ctx: Context | None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(args_in)
    if command in ("run", "shell"):  # from here on a signal is the run's (rocmenv.run.interrupt)
        if argv is None:  # the program (not a test or an embedding): see resume_collection
            import gc  # (a local name: rocmenv.cli.gc, the command, would shadow a global)

            gc.disable()
        from rocmenv.run.interrupt import SignalWatch

        with SignalWatch(until_exit=argv is None):  # the program: to its very end
            status = _main(args_in, command, ctx)
            if argv is None:
                _end_now(status)
            return status
    status = _main(args_in, command, ctx)
    if argv is None and _only_daemon_threads_left():
        _end_now(status)  # Python's shutdown would only tear down modules (~7 ms with TLS)
    return status


def _only_daemon_threads_left() -> bool:
    """Nothing Python's shutdown would wait for: no thread but daemons (a registry command's
    dial-ahead and token threads), which it would abandon anyway. rocmenv registers no
    ``atexit`` handlers; a command that leaves a worker thread running ends the usual way,
    as does a process measured or traced (coverage.py, cProfile: their data is saved at
    exit). From Python 3.12 cProfile (and coverage.py, debuggers) may use ``sys.monitoring``
    instead of ``sys.setprofile``: any tool registered there counts too."""
    import threading

    if "coverage" in sys.modules or sys.getprofile() or sys.gettrace():
        return False
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    if monitoring is not None and any(monitoring.get_tool(i) for i in range(6)):
        return False
    main = threading.main_thread()
    return all(t.daemon or t is main for t in threading.enumerate())


def resume_collection(*_: object) -> None:
    """The garbage collector back on, once a run's start-up is over (the container created,
    an image about to be pulled, or the Slurm job about to be submitted). Start-up — the imports, the parser, settings,
    plan and spec — allocates a few hundred thousand objects and leaves ~200 in reference
    cycles; the ~20 collections Python would make meanwhile cost ~5 ms of every run (issue
    20). What start-up made is frozen first (``gc.freeze``: kept, never scanned again — the
    ~200 small cycles included), so the collections of the rest of the run see only what
    it makes."""
    import gc  # (a local name: rocmenv.cli.gc, the command, would shadow a global)

    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _end_now(status: int) -> NoReturn:
    """A run's status is final: the process ends with it, now. Python's own shutdown would
    first give SIGINT/SIGTERM their default actions back, so a second Ctrl-C landing in it
    would kill the process by the signal instead of returning the run's status (and it
    would tear down the run's finished daemon threads for nothing)."""
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nobody reads any more
            stream.flush()
    os._exit(status)


def _main(args_in: list[str], command: str | None, ctx: Context | None) -> int:
    parser = build_parser(command)
    args = parser.parse_args(args_in)
    if args.rocmenv_command is None:  # `rocmenv` alone: what it takes, briefly
        import textwrap

        out = ctx.stdout if ctx is not None else sys.stdout
        names = textwrap.fill(", ".join(COMMANDS), _terminal_columns() - 2,
                              initial_indent="commands: ", subsequent_indent="  ")  # fmt: skip
        out.write(
            f"{parser.format_usage()}{names}\n"
            "see `rocmenv --help` for what each does, `rocmenv help COMMAND` for one\n"
        )
        return EXIT_OK
    from pathlib import Path

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
        from rocmenv.cli._common import report_error  # (not on a run's path: ~0.3 ms)

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

        with contextlib.suppress(OSError, ValueError):  # no second error when Python flushes
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as err:  # a bug: one redacted paragraph, the traceback only with --debug
        from rocmenv.cli._common import report_internal_error

        return report_internal_error(ctx, err, command=args.rocmenv_command)
    return EXIT_INTERNAL  # not reached (for type checkers)
