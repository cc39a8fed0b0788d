"""`rocmenv resolve REPO[:TAG] [constraints] [--digest] [--json]`.

Inside GitHub Actions the step outputs ``image`` (``repo:tag``), ``digest`` and ``pinned``
(``repo:tag@sha256:…``) are appended to ``$GITHUB_OUTPUT`` (the digest costs one ``HEAD``).
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.cli._args import add_constraint_args, constraints_from, has_constraints
from rocmenv.cli._common import emit, emit_json, gha_output, registry_json
from rocmenv.context import Context
from rocmenv.errors import EXIT_OK


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name,
        help=help_text,
        description="Print the newest tag of REPO that meets the constraints (nightlies by date, "
        "releases by PEP 440 version). With REPO:TAG, look that tag up. Exit 1 when nothing "
        "matches, naming the nearest candidates.",
    )
    parser.add_argument("repository", metavar="REPO[:TAG]", nargs="?", help="e.g. rocm/sgl-dev")
    parser.add_argument(
        "--profile", metavar="P",
        help="use the image and constraints of profile P (default, without REPO: the default "
        "profile's)",
    )  # fmt: skip
    add_constraint_args(parser)
    parser.add_argument(
        "--digest", action="store_true", help="print repo:tag@sha256:… (one HEAD request)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.errors import UsageError
    from rocmenv.grammar.reference import parse
    from rocmenv.grammar.tags import parse_tag
    from rocmenv.image.pinning import constraints_of, make_client, resolve, spec_of
    from rocmenv.settings.resolve import settings_for

    config = settings_for(ctx)
    if args.profile or not (args.repository or has_constraints(args)):
        if args.repository or has_constraints(args):
            raise UsageError("give either --profile or REPO with constraints, not both")
        # --profile, else the default profile (ROCMENV_PROFILE, default-profile, rocm)
        profile = config.project.profile(args.profile) if args.profile else config.profile
        if profile.image is None:
            raise UsageError(
                f"profile {profile.name!r} names no image to resolve"
                + ("" if args.profile else " (the default profile)"),
                hint="name a repository (rocmenv resolve rocm/sgl-dev --gpu mi30x), a profile "
                f'with an image (--profile), or set image = "rocm/sgl-dev" in [profiles.'
                f"{profile.name}]",
            )
        spec = spec_of(profile)
        ref = parse(spec.repository)
        if spec.tag:
            ref = ref.with_tag(spec.tag)
        constraints = constraints_of(spec)
    elif args.repository:
        ref = parse(args.repository)
        constraints = constraints_from(args)
    else:
        raise UsageError(
            "constraints need a repository to apply to (e.g. rocmenv resolve rocm/sgl-dev "
            "--gpu mi30x)",
            hint="see `rocmenv resolve --help`",
        )
    if ref.digest:
        raise UsageError(
            f"{args.repository} is already pinned to a digest",
            hint="use `rocmenv validate` to check it",
        )
    with make_client(ctx, config) as client:
        if ref.tag:
            if has_constraints(args):
                raise UsageError("give either REPO:TAG or constraints, not both")
            info = parse_tag(ref.tag)
            matches, total = 1, None
        else:
            resolution = resolve(client, ref, constraints)
            info, matches, total = resolution.best, len(resolution.matches), resolution.total
            ref = resolution.reference
        digest = None
        registry = None
        outputs = ctx.in_github_actions and bool(ctx.env.get("GITHUB_OUTPUT"))
        if args.digest or args.json or outputs:
            registry, head = client.head_manifest(ref)
            digest = head.digest
        extra = registry_json(ctx, client)
    pinned = f"{ref.familiar}@{digest}" if digest else ref.familiar
    gha_output(ctx, {"image": ref.familiar, "digest": digest or "", "pinned": pinned})
    if args.json:
        emit_json(
            ctx,
            {
                "repository": ref.name,
                "tag": ref.tag,
                "reference": ref.familiar,
                "digest": digest,
                "pinned": pinned,
                "registry": registry,
                "info": info.to_json(),
                "matching": matches,
                "total": total,
                **extra,
            },
        )
    else:
        emit(ctx, pinned if args.digest else ref.familiar)
    return EXIT_OK
