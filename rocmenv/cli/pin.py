"""`rocmenv pin [--profile P … | REF …] [--update] [--json]`.

Inside GitHub Actions the step outputs are appended to ``$GITHUB_OUTPUT``: ``lockfile``,
``pins`` (JSON: key → ``repo[:tag]@digest``) and, when one entry was pinned, ``image``
(``repo:tag``), ``digest`` and ``pinned``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rocmenv.cli._common import add_lock_arg, emit, emit_json, gha_output, registry_json
from rocmenv.context import Context
from rocmenv.errors import EXIT_OK

if TYPE_CHECKING:
    from rocmenv.grammar.reference import Reference
    from rocmenv.image.lock import Lock, LockEntry
    from rocmenv.settings.profiles import Profile
    from rocmenv.settings.resolve import Settings


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name,
        help=help_text,
        description="Resolve profiles (or bare references) to digests and record them in "
        "rocmenv.lock (atomic write, safe against concurrent pins). Without arguments, every "
        "profile of the project file that names an image. Pinned entries are kept unless "
        "--update is given or the profile's image changed.",
    )
    parser.add_argument(
        "refs", nargs="*", metavar="REF", help="bare references to pin (keyed by reference)"
    )
    parser.add_argument(
        "--profile", action="append", default=[], metavar="NAME", help="profile to pin (repeatable)"
    )
    parser.add_argument(
        "--update", action="store_true", help="re-resolve entries that are already pinned"
    )
    add_lock_arg(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.grammar.reference import parse
    from rocmenv.image.lock import read_lock, update_lock
    from rocmenv.image.pinning import make_client, spec_of
    from rocmenv.settings.resolve import Flags, settings_for

    config = settings_for(ctx, Flags(lockfile=args.lock))
    lock_file = config.lockfile
    refs = [parse(text) for text in args.refs]  # grammar first: nothing invalid goes further
    profile_names = _profile_names(args, config) if not refs else list(args.profile)
    profiles = [config.project.profile(name) for name in profile_names]
    specs = {p.name: spec_of(p) for p in profiles}
    current = read_lock(lock_file)

    results: list[dict[str, Any]] = []
    with make_client(ctx, config) as client:
        new_profiles = _pin_profiles(client, profiles, specs, current, args.update, results)
        new_refs = _pin_references(client, refs, current, args.update, results)
        extra = registry_json(ctx, client)

    def change(lock: Lock) -> Lock:
        for name, entry in new_profiles.items():
            lock = lock.with_profile(name, entry)
        for key, entry in new_refs.items():
            lock = lock.with_reference(key, entry)
        return lock

    if new_profiles or new_refs:
        update_lock(lock_file, change, within=ctx.checkout)
    _outputs(ctx, str(lock_file), results)
    if args.json:
        emit_json(ctx, {"lockfile": str(lock_file), "entries": results, **extra})
        return EXIT_OK
    for item in results:
        line = f"{item['kind']} {item['key']}: {item['pinned']} ({item['status']})"
        if item["status"] == "updated":
            line += f"\n  was {item['previous_digest']}"
        emit(ctx, line)
    if not (new_profiles or new_refs):
        ctx.stderr.write(f"{lock_file}: nothing changed (use --update to re-resolve)\n")
    return EXIT_OK


def _profile_names(args: argparse.Namespace, config: Settings) -> list[str]:
    """The profiles named by ``--profile``; without them (and without references), every
    profile of the project file that names an image (:class:`UsageError` if none does)."""
    from rocmenv.errors import UsageError

    profile_names: list[str] = list(args.profile)
    if not profile_names:
        profile_names = [
            name
            for name, prof in config.project.profiles
            if prof.source != "built-in" and prof.image is not None
        ]
        if not profile_names:
            raise UsageError(
                "nothing to pin: no profile names an image"
                + (
                    f" in {config.project.path}"
                    if config.project.path
                    else " (no rocmenv.toml found)"
                ),
                hint="pass references (`rocmenv pin rocm/sgl-dev:TAG`) or add a profile with an image",
            )
    return profile_names


def _pin_profiles(
    client: Any,
    profiles: list[Profile],
    specs: dict[str, Any],
    current: Lock,
    update: bool,
    results: list[dict[str, Any]],
) -> dict[str, LockEntry]:
    """The profiles' new lock entries (a pinned one kept unless ``update`` or its image
    changed); each profile's result appended to ``results``."""
    from rocmenv.image.pinning import entry_matches_spec, pin_spec

    new_profiles: dict[str, LockEntry] = {}
    for prof in profiles:
        old = current.profiles.get(prof.name)
        if old is not None and not update and entry_matches_spec(old, specs[prof.name]):
            results.append(_result("profile", prof.name, old, old, "unchanged"))
            continue
        entry = pin_spec(client, specs[prof.name], old)
        if entry is old:  # the tag still points at the locked digest (HEAD only)
            results.append(_result("profile", prof.name, old, old, "unchanged"))
            continue
        new_profiles[prof.name] = entry
        results.append(_result("profile", prof.name, entry, old, _status(old, entry)))
    return new_profiles


def _pin_references(
    client: Any,
    refs: list[Reference],
    current: Lock,
    update: bool,
    results: list[dict[str, Any]],
) -> dict[str, LockEntry]:
    """The bare references' new lock entries (a pinned one kept unless ``update``); each
    reference's result appended to ``results``."""
    from rocmenv.image.pinning import pin_reference, reference_key

    new_refs: dict[str, LockEntry] = {}
    for ref in refs:
        key = reference_key(ref)
        old = current.references.get(key)
        if old is not None and not update:
            results.append(_result("reference", key, old, old, "unchanged"))
            continue
        entry = pin_reference(client, ref, old)
        if entry is old:
            results.append(_result("reference", key, old, old, "unchanged"))
            continue
        new_refs[key] = entry
        results.append(_result("reference", key, entry, old, _status(old, entry)))
    return new_refs


def _outputs(ctx: Context, lockfile: str, results: list[dict[str, Any]]) -> None:
    import json

    values = {
        "lockfile": lockfile,
        "pins": json.dumps({r["key"]: r["pinned"] for r in results}, sort_keys=True),
    }
    if len(results) == 1:
        entry = results[0]["entry"]
        tag = entry.get("tag")
        values["image"] = f"{entry['repository']}:{tag}" if tag else entry["repository"]
        values["digest"] = entry["digest"]
        values["pinned"] = results[0]["pinned"]
    gha_output(ctx, values)


def _status(old: Any, new: Any) -> str:
    if old is None:
        return "new"
    return "unchanged" if old.digest == new.digest and old.tag == new.tag else "updated"


def _result(kind: str, key: str, entry: Any, old: Any, status: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "key": key,
        "status": status,
        "pinned": f"{entry.repository}:{entry.tag}@{entry.digest}" if entry.tag else entry.pinned,
        "entry": entry.to_json(),
        "previous_digest": old.digest if old is not None else None,
    }
