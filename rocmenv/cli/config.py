"""``rocmenv config show [--origin] [--json]`` and ``rocmenv config schema``.

``show`` prints every effective setting — flag > ``ROCMENV_*`` > profile > site file > user
file > project file > default — and with ``--origin`` the level and source of each (the
answer to "why did it do that?"). JSON (``show_version`` 1)::

  {"show_version": 1, "untrusted": bool,
   "files": {"site": str | null, "user": str | null, "project": str | null},
   "settings": [{"key": str, "value": ..., "origin": "flag" | "env" | "profile" | "site" |
                 "user" | "project" | "default", "where": str}],
   "notes": [str]}

``schema`` prints the JSON Schema of the project file (``rocmenv.toml``, ``[tool.rocmenv]``)
and the site and user configuration, generated from rocmenv's own key tables.

Exit codes: 0, 2 (a bad configuration: the error names the file and key).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmenv.context import Context
from rocmenv.settings.choices import ENGINE_NAMES

SHOW_VERSION = 1
SCHEMA_FILES = ("project", "site", "policy")


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    configsub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    p = configsub.add_parser(
        "show",
        help="every effective setting (and with --origin where it came from)",
        description="Every effective setting: flag > ROCMENV_* > profile > site file "
        "(/etc/rocmenv/config.toml) > user file ($XDG_CONFIG_HOME/rocmenv/config.toml) > "
        "project file > default.",
    )
    p.add_argument("--origin", action="store_true", help="the level and source of each value")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-p", "--profile", metavar="NAME", help="as a command with --profile NAME")
    p.add_argument("--engine", choices=ENGINE_NAMES, help="as a command with --engine")
    p.add_argument("--lock", type=Path, metavar="FILE", help="as a command with --lock FILE")
    p.add_argument("--untrusted", action="store_true", help="as a command with --untrusted")
    p.set_defaults(func=run_show)
    p = configsub.add_parser(
        "schema",
        help="the JSON Schema of rocmenv.toml / [tool.rocmenv] and the site configuration",
    )
    p.add_argument(
        "--file",
        choices=SCHEMA_FILES,
        default="project",
        help="project: rocmenv.toml / [tool.rocmenv] (default); site: /etc/rocmenv/config.toml "
        "and the user's; policy: the file ROCMENV_POLICY names",
    )
    p.set_defaults(func=run_schema)


def run_show(args: argparse.Namespace, ctx: Context) -> int:
    import json

    from rocmenv.cli._common import emit, emit_json
    from rocmenv.settings.explain import effective, files
    from rocmenv.settings.resolve import Flags, settings_for

    flags = Flags(
        profile=args.profile, engine=args.engine, lockfile=args.lock, untrusted=args.untrusted
    )
    settings = settings_for(ctx, flags)
    rows = effective(ctx, settings)
    if args.json:
        emit_json(ctx, {
            "show_version": SHOW_VERSION, "untrusted": settings.untrusted,
            "files": files(ctx, settings), "settings": [r.to_json() for r in rows],
            "notes": list(settings.notes),
        })  # fmt: skip
        return 0
    if args.origin:
        for level, path in files(ctx, settings).items():
            emit(ctx, f"# {level} file: {path or '-'}")
    width = max(len(r.key) for r in rows)
    for r in rows:
        text = f"{r.key.ljust(width)} = {json.dumps(r.value, sort_keys=True)}"
        if args.origin:
            text += f"  # {r.origin}" + ("" if r.origin == "default" else f": {r.where}")
        emit(ctx, text)
    if not settings.untrusted:
        ctx.stderr.write("rocmenv config: policy.* apply in untrusted mode only\n")
    for note in settings.notes:
        ctx.stderr.write(f"rocmenv config: note: {note}\n")
    return 0


def run_schema(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.settings.schema import dumps

    ctx.stdout.write(dumps(schema_for(args.file)))
    return 0


def schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema of one kind of file (:data:`SCHEMA_FILES`), from the key tables."""
    from rocmenv.settings.schema import policy_schema, project_schema, site_schema
    from rocmenv.suite.schema import labels_schema, suite_schema

    if kind == "site":
        return site_schema()
    if kind == "policy":
        return policy_schema()
    return project_schema(suite_schema(), labels_schema())
