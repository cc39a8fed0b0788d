"""`rocmenv validate [REF | --profile P] [--json]`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rocmenv.cli._common import add_lock_arg, emit, emit_json, registry_json
from rocmenv.context import Context
from rocmenv.errors import EXIT_CHECK_FAILED, EXIT_OK

if TYPE_CHECKING:
    from rocmenv.image.lock import Lock
    from rocmenv.image.pinning import Validation
    from rocmenv.settings.resolve import Settings


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name,
        help=help_text,
        description="Check grammar, existence, linux/amd64, that the tag still points at the "
        "locked digest, and that the manifest bytes hash to their digest. Without arguments, "
        "every entry of the lockfile. Exit 1 when a check fails (a moved tag names the old and "
        "new digests), 2 for a malformed reference, 3 when the registry cannot be asked.",
    )
    parser.add_argument("ref", nargs="?", metavar="REF")
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="validate this profile (its pin, or its tag if not pinned)",
    )
    add_lock_arg(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.errors import UsageError
    from rocmenv.image.lock import read_lock
    from rocmenv.image.pinning import make_client, validate
    from rocmenv.settings.resolve import Flags, settings_for

    if args.ref and args.profile:
        raise UsageError("give either REF or --profile, not both")
    config = settings_for(ctx, Flags(lockfile=args.lock, profile=args.profile))
    lock_file = config.lockfile
    lock = read_lock(lock_file)
    notes: list[str] = []
    jobs = _jobs(args, config, lock, notes)

    results: list[Validation] = []
    with make_client(ctx, config) as client:
        for kind, subject, ref, entry in jobs:
            results.append(validate(client, subject, kind, ref, entry))
        extra = registry_json(ctx, client)
    ok = all(r.ok for r in results)
    if args.json:
        emit_json(
            ctx,
            {
                "ok": ok,
                "lockfile": str(lock_file),
                "notes": notes,
                **extra,
                "results": [
                    {
                        "kind": r.kind,
                        "subject": r.subject,
                        "ok": r.ok,
                        "moved": r.moved,
                        "locked_digest": r.locked_digest,
                        "current_digest": r.current_digest,
                        "checks": [
                            {"name": c.name, "ok": c.ok, "detail": c.detail} for c in r.checks
                        ],
                    }
                    for r in results
                ],
            },
        )
    else:
        _report(ctx, results, notes, ok)
    return EXIT_OK if ok else EXIT_CHECK_FAILED


def _jobs(
    args: argparse.Namespace, config: Settings, lock: Lock, notes: list[str]
) -> list[tuple[Any, Any, Any, Any]]:
    """What to validate, as (kind, subject, ref, entry): REF, the profile (``--profile``, or
    the default one when the lockfile is empty), else every entry of the lockfile. A note
    for a profile that is not pinned is appended to ``notes``."""
    from rocmenv.grammar.reference import parse
    from rocmenv.image.pinning import reference_key

    jobs: list[tuple[Any, Any, Any, Any]] = []  # (kind, subject, ref, entry)
    if args.ref:
        ref = parse(args.ref)
        if not ref.tag and not ref.digest:
            ref = ref.with_tag("latest")
        key = reference_key(ref)
        jobs.append(("reference", key, ref, lock.references.get(key)))
    elif args.profile or not (lock.profiles or lock.references):
        jobs.append(_profile_job(config, lock, notes))
    else:
        for kind, key, entry in lock.entries():
            ref = parse(entry.repository)
            ref = ref.with_tag(entry.tag) if entry.tag else ref.with_digest(entry.digest)
            jobs.append((kind, key, ref, entry))
    return jobs


def _profile_job(config: Settings, lock: Lock, notes: list[str]) -> tuple[Any, Any, Any, Any]:
    """The profile's job: its pin, else its fixed tag or digest (:class:`UsageError` for
    tag constraints not pinned yet)."""
    from rocmenv.errors import UsageError
    from rocmenv.grammar.reference import parse, parse_repository
    from rocmenv.image.pinning import spec_of

    lock_file = config.lockfile
    prof = config.profile
    entry = lock.profiles.get(prof.name)
    spec = spec_of(prof)
    if entry is not None:
        ref = parse(entry.repository)
        ref = ref.with_tag(entry.tag) if entry.tag else ref.with_digest(entry.digest)
    else:
        repo = parse_repository(spec.repository)
        if spec.has_constraints and not spec.tag:
            raise UsageError(
                f"profile {prof.name!r} is not pinned and has no fixed tag to validate",
                hint=f"run `rocmenv pin --profile {prof.name}` first",
            )
        ref = repo.with_digest(spec.digest) if spec.digest else repo.with_tag(spec.tag or "latest")
        notes.append(f"profile {prof.name!r} is not pinned in {lock_file}")
    return ("profile", prof.name, ref, entry)


def _report(ctx: Context, results: list[Validation], notes: list[str], ok: bool) -> None:
    """The results as text: the notes, each check, and what failed (moved tags named)."""
    from rocmenv.escape import shown

    for note in notes:
        ctx.stderr.write(f"rocmenv validate: note: {shown(note)}\n")
    for r in results:
        emit(ctx, f"{'ok' if r.ok else 'FAILED'}  {r.kind} {r.subject}")
        for c in r.checks:
            emit(ctx, f"  {'✓' if c.ok else '✗'} {c.name}: {c.detail}")
    if not ok:
        failed = [r for r in results if not r.ok]
        moved = [r for r in failed if r.moved]
        msg = f"rocmenv validate: error: {len(failed)} of {len(results)} failed validation"
        if moved:
            msg += "; moved: " + ", ".join(
                f"{r.subject} ({r.locked_digest} → {r.current_digest})" for r in moved
            )
            msg += "\nhint: run `rocmenv pin --update` to accept the new images, after checking what changed (`rocmenv drift --inspect`)"
        ctx.stderr.write(shown(msg, lines=True) + "\n")
        if ctx.in_github_actions:
            ctx.joblog.command(
                "error", f"{len(failed)} image(s) failed validation", title="rocmenv validate"
            )
