"""``rocmenv inspect REF [--json]`` and ``rocmenv diff REF_A REF_B [--json|--format …]``:
what is inside images, read from the registry without pulling (:mod:`rocmenv.contents`)."""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    if name == "diff":
        parser.add_argument("ref_a", metavar="REF_A")
        parser.add_argument("ref_b", metavar="REF_B")
        parser.add_argument(
            "--format", choices=("text", "json", "markdown"), default="text", help="output format"
        )
        parser.add_argument("--json", action="store_true", help="same as --format json")
        parser.set_defaults(func=run_diff)
    else:
        parser.add_argument("ref", metavar="REF")
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.set_defaults(func=run_inspect)


def read(ctx: Context, text: str) -> tuple[dict[str, Any], Any]:
    from rocmenv.contents.image import read_image
    from rocmenv.contents.store import LayerStore
    from rocmenv.grammar.reference import parse
    from rocmenv.image.pinning import make_client
    from rocmenv.settings.resolve import settings_for
    from rocmenv.shims.catalogue import discover_shims

    ref = parse(text)
    with make_client(ctx, settings_for(ctx)) as client:
        return read_image(client, LayerStore.default(ctx), ref, discover_shims())


def run_inspect(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json

    doc, stats = read(ctx, args.ref)
    doc["read"] = {
        "layers": stats.layers,
        "layers_read": stats.layers_read,
        "bytes": stats.bytes_read,
    }
    if args.json:
        emit_json(ctx, doc)
        return 0
    from rocmenv.escape import shown

    def s(value: object) -> str:  # every fact below is the image's own
        return shown(str(value))

    os_name = doc["os"].get("PRETTY_NAME") or "unknown OS"
    python = doc["python"]
    emit(ctx, f"{s(doc['image'])} ({s(doc['platform_digest'][:19])}…)")
    emit(ctx, f"  OS: {s(os_name)}; Python {s(python['version'])} ({s(python['executable'])})")
    emit(ctx, f"  ROCm: {s(doc['rocm']['version'] or 'none')}")
    emit(ctx, f"  distributions ({len(doc['distributions'])}):")
    for row in doc["locations"]:
        emit(ctx, f"    {s(row['name'])} {s(row['version'])}  {s(row['location'])}")
    for shim in doc["shims"]:
        verdict = {True: "would apply", False: "not needed", None: "unknown"}[shim["would_apply"]]
        emit(ctx, f"  shim {shim['name']}: {verdict} — {s(shim['reason'])}")
    from rocmenv.run.pull import human_bytes

    emit(
        ctx,
        f"  read {stats.layers_read} of {stats.layers} layers ({human_bytes(stats.bytes_read)}); "
        "the others were indexed before",
    )
    return 0


def run_diff(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.contents.diff import diff_contents, render_markdown, render_text

    a, _ = read(ctx, args.ref_a)
    b, _ = read(ctx, args.ref_b)
    doc = diff_contents(a, b)
    if args.json or args.format == "json":
        emit_json(ctx, doc)
    elif args.format == "markdown":
        ctx.stdout.write(render_markdown(doc))
    else:
        emit(ctx, render_text(doc))
    return 0
