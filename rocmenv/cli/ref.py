"""`rocmenv ref parse REF… [--json]`."""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.cli._common import emit, emit_json
from rocmenv.context import Context
from rocmenv.errors import EXIT_OK, EXIT_USAGE


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    refsub = parser.add_subparsers(dest="ref_command", metavar="SUBCOMMAND", required=True)
    p = refsub.add_parser("parse", help="parse and normalise references (exit 2 if any is invalid)")
    p.add_argument("refs", nargs="+", metavar="REF")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_parse)


def run_parse(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.errors import ReferenceSyntaxError
    from rocmenv.escape import shown
    from rocmenv.grammar.reference import parse

    results: list[dict[str, Any]] = []
    status = EXIT_OK
    for text in args.refs:
        try:
            ref = parse(text)
        except ReferenceSyntaxError as err:
            from rocmenv.redact import redact_json

            status = EXIT_USAGE  # an invalid input may be a URL with credentials: redacted
            item_err = {"input": text, "valid": False, "rule": err.rule, "error": err.detail}
            results.append(redact_json(item_err))
            continue
        item: dict[str, Any] = ref.to_json()
        item.update(input=text, valid=True)
        results.append(item)
    if args.json:
        emit_json(ctx, results)
    else:
        for item in results:
            if item["valid"]:
                emit(ctx, f"{item['input']}\t{item['canonical']}")
            else:
                message = shown(
                    f"invalid reference {item['input']!r}: {item['error']} (rule: {item['rule']})"
                )
                ctx.stderr.write(f"rocmenv ref parse: error: {message}\n")
                if ctx.in_github_actions:
                    ctx.joblog.command("error", message, title="rocmenv ref parse")
    return status
