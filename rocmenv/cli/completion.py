"""``rocmenv completion bash|zsh|fish``: a completion script for the shell, and the completion
itself.

The script is argcomplete's (``eval "$(rocmenv completion bash)"``; zsh and fish alike):
on TAB the shell runs ``rocmenv`` with ``_ARGCOMPLETE`` set, :func:`complete` builds the
whole parser — every command, its flags and choices, generated from the very parser the
command line uses — and answers. Profile names (``--profile``) and suite names come
from the configuration of the directory the user is in. Ordinary runs pay one environment
lookup for this (``rocmenv --help`` still builds only the parser it prints).

Why argcomplete and not a static script generator such as shtab: shtab writes bash, zsh and
tcsh but no fish, and a static script cannot know the profiles and suites of the project
at hand; argcomplete serves all three shells from the live parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name,
        help=help_text,
        description=help_text + '. E.g. `eval "$(rocmenv completion bash)"` in ~/.bashrc, '
        "`rocmenv completion fish > ~/.config/fish/completions/rocmenv.fish`.",
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Any) -> int:
    from argcomplete.shell_integration import shellcode

    ctx.stdout.write(shellcode(["rocmenv"], shell=args.shell))
    return 0


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (exits the process)."""
    import argcomplete

    for action, kind in _name_actions(parser):
        action.completer = _names(kind)  # type: ignore[attr-defined]
    _drop_hidden(parser)
    argcomplete.autocomplete(parser)


def _drop_hidden(parser: argparse.ArgumentParser) -> None:
    """Internal subcommands (``suite slurm-exec``: no help line) are not offered; this parser
    only answers the shell, so they are taken out of it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {a.dest for a in action._choices_actions}
            for name in [n for n in action.choices if n not in listed]:
                del action.choices[name]
            for child in action.choices.values():
                _drop_hidden(child)


def _name_actions(parser: argparse.ArgumentParser) -> Iterator[tuple[argparse.Action, str]]:
    """Every ``--profile`` option, and the suite name of ``suite list|plan|run``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if parser.prog.endswith(" suite") and name in ("list", "plan", "run"):
                    yield from ((a, "suites") for a in child._actions if a.dest == "name")
                yield from _name_actions(child)
        elif action.dest == "profile" and action.option_strings:
            yield action, "profiles"


def _names(kind: str) -> Callable[..., list[str]]:
    def names(**_: Any) -> list[str]:
        from rocmenv.context import Context
        from rocmenv.errors import RocmenvError
        from rocmenv.settings.project import load_project

        try:
            project = load_project(Context())
        except RocmenvError:
            return []
        return project.profile_names if kind == "profiles" else sorted(project.suites)

    return names
