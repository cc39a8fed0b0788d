"""``rocmenv help [COMMAND [SUBCOMMAND]]``: the help of a command (what ``rocmenv COMMAND
[SUBCOMMAND] --help`` prints); alone, the help of rocmenv itself.

Exit codes: 0, 2 (no such command).
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument(
        "topic", nargs="*", metavar="COMMAND", help="a command, and one of its subcommands"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli import COMMANDS, build_parser
    from rocmenv.errors import UsageError
    from rocmenv.settings.keys import did_you_mean

    topic: list[str] = list(args.topic)
    if not topic:
        ctx.stdout.write(build_parser(None).format_help())
        return 0
    if topic[0] not in COMMANDS:
        raise UsageError(
            f"no command {topic[0]!r}" + did_you_mean(topic[0], tuple(COMMANDS)),
            hint="`rocmenv --help` lists the commands",
        )
    parser: argparse.ArgumentParser = build_parser(topic[0])
    for word in topic:
        children = _subcommands(parser)
        if word not in children:
            shown = " ".join(topic[: topic.index(word)]) or "rocmenv"
            raise UsageError(
                f"{shown!r} has no subcommand {word!r}" + did_you_mean(word, tuple(children)),
                hint=f"`rocmenv help {' '.join(topic[: topic.index(word)])}` lists them"
                if children
                else f"`rocmenv help {topic[0]}` shows what it takes",
            )
        parser = children[word]
    ctx.stdout.write(parser.format_help())
    return 0


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}
