"""`rocmenv drift [--lock FILE] [--profile P …] [--format text|json|markdown] [--inspect]
[--fail-on moved|newer|any|never] [--jobs N] [--engine E]`.

JSON (``--format json`` or ``--json``; ``report_version`` 1, keys stable)::

  {"report_version": 1, "lockfile": str, "fail_on": str, "exit_code": int,
   "status": "ok" | "drift" | "incomplete",
   "summary": {"images", "moved", "newer", "errors", "inspect_errors": int},
   "ratelimit": [{"host", "limit", "remaining", "window"}], "probes": int, "inspect_bytes": int | null,
   "stats": {"round_trips": int, "by_kind": {kind: int}}   (unstable: may change any release),
   "images": [{"kind": "profile" | "reference", "key", "repository", "tag": str | null,
               "pinned_digest", "pinned_platform_digest",
               "status": "ok" | "drift" | "error", "fails": bool,
               "tag_state": "same" | "moved" | "gone" | "unchecked", "moved": bool,
               "current_digest": str | null,
               "newer": bool, "newer_basis": str, "newer_tags": [str, newest first],
               "newest": {"tag", "digest"} | null, "notes": [str],
               "error": {"type", "message", "hint"} | null,
               "accept": str | null,          # the command that accepts the new state
               "inspect": null | {"against": "moved" | "newer", "new_reference",
                   "pinned": FACTS | null, "new": FACTS | null,
                   "packages": [{"name", "pinned", "new",
                                 "change": "added" | "removed" | "upgraded" | "downgraded" | "changed"}],
                   "shims": [{"name", "pinned", "new": bool | null,
                              "verdict": "retire" | "newly-needed" | "still-needed" | "not-needed" | "unknown",
                              "message"}],
                   "error": {"type", "message", "hint"} | null}}]}
  FACTS = {"reference", "python", "rocm": str | null, "packages": int}
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rocmenv.cli._common import add_lock_arg
from rocmenv.context import Context
from rocmenv.settings.choices import ENGINE_NAMES, EngineName

if TYPE_CHECKING:
    from rocmenv.drift.check import ImageDrift

EPILOG = """\
exit codes:
  0  no drift (or drift that --fail-on does not count)
  1  drift found: a tag moved (--fail-on moved|any) or newer tags exist (--fail-on newer|any)
  2  usage or configuration error (bad flag, unknown/unpinned profile, empty lockfile)
  3  could not check: a registry was unreachable, refused (auth) or kept failing (5xx/429
     after retries); never reported as "no drift". Partial results are still printed.
  4  --inspect-from engine could not pull or probe an image (engine error); results are
     printed. (--inspect reads images from the registry: a failure there is 3.)

what "newer" means: for profiles pinned from constraints, the lock's constraints resolved
again; for a nightly tag, later nightlies of the same ROCm/GPU/suffix; for a release, higher
SGLang releases of the same ROCm/GPU; for a dated floating tag (miles-rocm720-mi35x-DATE),
later dated siblings; a moving tag (miles-rocm720-mi35x) only "moves".

accept a change with `rocmenv pin --update` (drift never writes the lockfile)."""


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name,
        help=help_text,
        description="For every image pinned in rocmenv.lock: has its tag moved to another "
        "digest (HEAD requests, no pull-limit cost), and are there newer tags of the same "
        "line? With --inspect, read the pinned and the new image from the registry (nothing is "
        "pulled: layers are streamed once into a small index) and report what changed "
        "inside: packages, ROCm, Python, and which shims became (un)necessary. "
        "Images are checked concurrently.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_lock_arg(parser)
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="P",
        help="check only this pinned profile (repeatable; default: every lock entry)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default="text",
        help="output: concise text (default), JSON, or Markdown for $GITHUB_STEP_SUMMARY",
    )
    parser.add_argument("--json", action="store_true", help="same as --format json")
    parser.add_argument(
        "--inspect",
        action="store_true",
        help="read drifted images: package, ROCm, Python and shim changes",
    )
    parser.add_argument(
        "--inspect-from",
        choices=("registry", "engine"),
        default="registry",
        help="registry: stream the layers, pull nothing (default); engine: pull both images "
        "and run the probe in a container",
    )
    parser.add_argument(
        "--fail-on",
        choices=("moved", "newer", "any", "never"),
        default="any",
        help="which drift makes the exit code 1 (default: any)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=8,
        metavar="N",
        help="images checked concurrently (default: 8)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        help="container engine for --inspect-from engine (default: auto)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from typing import cast

    from rocmenv.drift.check import FailOn, check_all, exit_code, targets
    from rocmenv.drift.inspect import EngineProber, ProbeCache, RegistryProber, inspect_all
    from rocmenv.drift.report import render_markdown, render_text, report_json
    from rocmenv.errors import UsageError
    from rocmenv.escape import shown
    from rocmenv.image.lock import read_lock
    from rocmenv.image.pinning import entry_matches_spec, make_client
    from rocmenv.settings.resolve import Flags, settings_for

    if not 1 <= args.jobs <= 64:
        raise UsageError(f"--jobs {args.jobs} is out of range", hint="use 1 to 64")
    fmt = "json" if args.json else args.format
    fail_on = cast(FailOn, args.fail_on)
    config = settings_for(ctx, Flags(lockfile=args.lock, engine=args.engine))
    lock_file = config.lockfile
    lock = read_lock(lock_file)
    items = targets(lock, args.profile)
    changed: list[str] = []
    for name, prof in config.project.profiles:
        entry = lock.profiles.get(name)
        if (
            entry is not None
            and prof.image is not None
            and not entry_matches_spec(entry, prof.image)
        ):
            changed.append(name)

    progress = _progress(ctx) if ctx.stderr_is_tty and not ctx.in_github_actions else None
    probes = 0
    inspect_bytes: int | None = None
    with make_client(ctx, config) as client:
        results = check_all(client, items, jobs=args.jobs, progress=progress)
        if progress is not None:
            ctx.stderr.write("\r\033[K")
        if args.inspect:
            if args.inspect_from == "engine":
                prober: Any = EngineProber(
                    lambda: _open_engine(ctx, config.engine),
                    lambda: _bundle(ctx),
                )
            else:
                from rocmenv.contents.store import LayerStore
                from rocmenv.shims.catalogue import discover_shims

                prober = RegistryProber(client, LayerStore.default(ctx), discover_shims())
            cache = ProbeCache(prober)
            results = inspect_all(client, cache, results, jobs=min(args.jobs, 4))
            probes = cache.probes
            if isinstance(prober, RegistryProber):
                inspect_bytes = prober.bytes_read
        from rocmenv.cli._common import registry_json

        registry = registry_json(ctx, client)
    code = exit_code(results, fail_on)
    lock_arg = str(args.lock) if args.lock else None
    notes = [
        f"profile {name!r} changed in the config since it was pinned: "
        f"`rocmenv pin --profile {name}` pins what it now asks for"
        for name in changed
        if any(t.kind == "profile" and t.key == name for t in items)
    ]
    notes += [
        f"{r['host']}: {r['remaining']} of {r['limit']} pulls left (ratelimit-remaining)"
        for r in registry["ratelimit"]
        if r["remaining"] is not None
    ]
    if fmt == "json":
        from rocmenv.cli._common import emit_json

        emit_json(
            ctx,
            report_json(
                results,
                lockfile=str(lock_file),
                fail_on=fail_on,
                code=code,
                registry=registry,
                probes=probes,
                inspect_bytes=inspect_bytes,
                lock_arg=lock_arg,
                notes=notes,
            ),
        )
    elif fmt == "markdown":
        ctx.stdout.write(
            render_markdown(
                results, lockfile=str(lock_file), fail_on=fail_on, lock_arg=lock_arg, notes=notes
            )
        )
    else:
        text = render_text(
            results, lockfile=str(lock_file), fail_on=fail_on, lock_arg=lock_arg, notes=notes
        )
        ctx.stdout.write(shown(text, lines=True))
    _annotate(ctx, results, fail_on)
    return code


def _progress(ctx: Context) -> Any:
    def show(done: int, total: int) -> None:
        ctx.stderr.write(f"\rrocmenv drift: checked {done}/{total}")
        ctx.stderr.flush()

    return show


def _open_engine(ctx: Context, name: EngineName) -> Any:
    from rocmenv.engine.select import open_engine

    return open_engine(ctx, name)


def _bundle(ctx: Context) -> Any:
    from rocmenv.shims.bundle import prepare_launcher

    return prepare_launcher(ctx)


def _annotate(ctx: Context, results: list[ImageDrift], fail_on: str) -> None:
    if not ctx.in_github_actions:
        return
    from rocmenv.drift.check import fails
    from rocmenv.drift.report import line_head, subject
    from rocmenv.redact import redact

    for r in results:
        e = r.target.entry
        if r.problem is not None:
            msg = f"{line_head(r)}: could not check: {r.problem.message}"
            ctx.joblog.command("error", redact(msg), title="rocmenv drift")
            continue
        level = "error" if fails(r, fail_on) else "warning"  # type: ignore[arg-type]
        if r.tag_state == "moved":
            msg = f"{line_head(r)} moved from {e.digest} to {r.current_digest}"
        elif r.tag_state == "gone":
            msg = f"{line_head(r)} no longer exists"
        elif r.newer:
            msg = f"{line_head(r)}: newer tag {r.newer_tags[0]}"
        else:
            continue
        ctx.joblog.command(level, redact(msg), title="rocmenv drift")
        if r.inspection is not None and r.inspection.problem is not None:
            msg = f"{subject(r)}: inspection failed: {r.inspection.problem.message}"
            ctx.joblog.command("error", redact(msg), title="rocmenv drift")
