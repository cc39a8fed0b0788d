"""`rocmenv tags parse TAG…` and `rocmenv tags list REPO [constraints]`."""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.cli._args import add_constraint_args, constraints_from, has_constraints
from rocmenv.cli._common import emit, emit_json, registry_json
from rocmenv.context import Context
from rocmenv.errors import EXIT_OK, EXIT_USAGE
from rocmenv.escape import shown


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    tsub = parser.add_subparsers(dest="tags_command", metavar="SUBCOMMAND", required=True)
    p = tsub.add_parser("parse", help="classify tags (family, sglang, ROCm, GPU, date, suffix)")
    p.add_argument("tags", nargs="+", metavar="TAG")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_parse)
    p = tsub.add_parser("list", help="list a repository's tags from the registry, newest first")
    p.add_argument(
        "repository", metavar="REPO", help="e.g. rocm/sgl-dev or 127.0.0.1:5000/rocm/sgl-dev"
    )
    add_constraint_args(p)
    p.add_argument(
        "--page-size",
        type=int,
        metavar="N",
        help="ask the registry for pages of N tags (n=N, 1 to 1000)",
    )
    p.add_argument("--all", action="store_true", help="also list floating and unparsed tags")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_list)


def _row(info: Any) -> str:
    bits = [info.family]
    for label, value in (
        ("sglang", info.sglang),
        ("rocm", info.rocm),
        ("gpu", info.gpu),
        ("date", info.date),
        ("suffix", info.suffix),
    ):
        if value:
            bits.append(f"{label}={value}")
    if info.project not in (None, "sglang"):
        bits.append(f"project={info.project}")
    if info.problem:
        bits.append(f"({info.problem})")
    return f"{shown(info.tag)}\t{shown(' '.join(bits))}"  # a tag is the registry's


def run_parse(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.errors import ReferenceSyntaxError
    from rocmenv.grammar.reference import validate_tag
    from rocmenv.grammar.tags import parse_tag

    status = EXIT_OK
    results: list[dict[str, Any]] = []
    for tag in args.tags:
        try:
            validate_tag(tag)
        except ReferenceSyntaxError as err:
            from rocmenv.redact import redact_json

            status = EXIT_USAGE  # an invalid input may be a URL with credentials: redacted
            results.append(
                redact_json(
                    {
                        "tag": tag,
                        "valid": False,
                        "rule": err.rule,
                        "error": err.detail,
                        "hint": err.hint,
                    }
                )
            )
            continue
        item: dict[str, Any] = parse_tag(tag).to_json()
        item["valid"] = True
        results.append(item)
    if args.json:
        emit_json(ctx, results)
        return status
    for item in results:
        if not item["valid"]:
            ctx.stderr.write(
                f"rocmenv tags parse: error: invalid tag {shown(repr(item['tag']))}: "
                f"{shown(item['error'])}\nhint: {shown(item['hint'])}\n"
            )
            continue
        bits = [item["family"]] + [
            f"{k}={item[k]}"
            for k in ("sglang", "rocm", "gpu", "gfx", "date", "time", "suffix", "project")
            if item.get(k)
        ]
        if item.get("problem"):
            bits.append(f"({item['problem']})")
        emit(ctx, f"{shown(item['tag'])}\t{shown(' '.join(bits))}")
    return status


def run_list(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.grammar.reference import parse_repository
    from rocmenv.grammar.tags import parse_tag, select, sort_key, warm_up
    from rocmenv.image.pinning import make_client
    from rocmenv.settings.resolve import settings_for

    repo = parse_repository(args.repository)
    constraints = constraints_from(args)
    if args.page_size is not None and not 1 <= args.page_size <= 1000:
        from rocmenv.errors import UsageError

        raise UsageError(
            f"--page-size {args.page_size} is out of range: registries accept 1 to 1000 tags "
            "per page (Distribution answers 400 PAGINATION_NUMBER_INVALID above it)",
            hint="use --page-size 1000 or less",
        )
    config = settings_for(ctx)
    import threading  # classifying's first costs, paid while the list is on its way

    threading.Thread(target=warm_up, name="rocmenv-warm-up", daemon=True).start()
    with make_client(ctx, config) as client:
        tags = client.list_tags(repo, page_size=args.page_size)
        extra = registry_json(ctx, client)
    infos = [parse_tag(t) for t in tags]
    unknown = [i for i in infos if i.family == "unknown"]
    if has_constraints(args):
        listed = select(infos, constraints)
    else:
        listed = sorted((i for i in infos if i.family != "unknown"), key=sort_key, reverse=True)
    if args.all:
        listed += unknown
    if args.json:
        emit_json(
            ctx,
            {
                "repository": repo.name,
                "total": len(tags),
                "matching": len(listed),
                "tags": [i.to_json() for i in listed],
                "unparsed": [{"tag": i.tag, "problem": i.problem} for i in unknown],
                **extra,
            },
        )
        return EXIT_OK
    for info in listed:
        emit(ctx, _row(info))
    ctx.stderr.write(
        f"{len(listed)} of {len(tags)} tags of {repo.familiar_name} shown"
        + (f"; {len(unknown)} unparsed (use --all to see them)" if unknown and not args.all else "")
        + "\n"
    )
    return EXIT_OK
