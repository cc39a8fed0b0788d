"""Drift reports for people and programs: text, markdown (``$GITHUB_STEP_SUMMARY``) and the
stable JSON document (``report_version`` 1, docs/pinning.md "Drift"). Pure functions of the results.

Tags come from a registry and package names from an image: the text shows them through
:func:`rocmenv.escape.shown`, the markdown as escaped text or code spans
(:func:`rocmenv.escape.markdown_text`, ``markdown_code``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rocmenv.escape import markdown_code, markdown_text, shown

if TYPE_CHECKING:
    from rocmenv.drift.check import ImageDrift, ImageFacts, Inspection, Problem

# -- shared wording -------------------------------------------------------------------------------


def subject(r: ImageDrift) -> str:
    """``profile ci`` or, for a bare reference, the reference itself."""
    return f"profile {r.target.key}" if r.target.kind == "profile" else r.target.key


def line_head(r: ImageDrift) -> str:
    pinned = _pinned_ref(r)
    return f"{subject(r)}: {pinned}" if subject(r) != pinned else pinned


def _pinned_ref(r: ImageDrift) -> str:
    e = r.target.entry
    return f"{e.repository}:{e.tag}" if e.tag else f"{e.repository}@{e.digest}"


def accept_hint(r: ImageDrift, lock_arg: str | None) -> str | None:
    """How to accept the new state, or None when there is nothing to accept."""
    from rocmenv.drift.check import accept_command

    if r.status != "drift":
        return None
    e = r.target.entry
    if r.moved or e.constraints:
        return accept_command(r.target, lock_arg)
    newest = r.newer_tags[0]
    if r.target.kind == "profile":
        return (
            f"set tag = {newest!r} in profile {r.target.key!r} (or use tag constraints), "
            f"then `rocmenv pin --profile {r.target.key}`"
        )
    lock = f" --lock {lock_arg}" if lock_arg else ""
    return f"rocmenv pin{lock} {e.repository}:{newest}"


def _accept_text(hint: str) -> str:
    return markdown_text(hint) if not hint.startswith("rocmenv ") else markdown_code(hint)


def _what(r: ImageDrift) -> str:
    parts = []
    if r.tag_state == "moved":
        parts.append("moved")
    elif r.tag_state == "gone":
        parts.append("gone")
    if r.newer:
        parts.append("newer")
    return "+".join(parts) or ("could not check" if r.problem else "ok")


def _facts_json(f: ImageFacts | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "reference": f.reference,
        "python": f.python,
        "rocm": f.rocm,
        "packages": len(f.distributions),
    }


def _problem_json(p: Problem | None) -> dict[str, Any] | None:
    return None if p is None else {"type": p.type, "message": p.message, "hint": p.hint}


def _inspect_json(i: Inspection | None) -> dict[str, Any] | None:
    if i is None:
        return None
    return {
        "against": i.against,
        "new_reference": i.new_reference,
        "pinned": _facts_json(i.pinned),
        "new": _facts_json(i.new),
        "packages": [
            {"name": c.name, "pinned": c.pinned, "new": c.new, "change": c.change}
            for c in i.packages
        ],
        "shims": [
            {
                "name": s.name,
                "pinned": s.pinned,
                "new": s.new,
                "verdict": s.verdict,
                "message": s.message,
            }
            for s in i.shims
        ],
        "error": _problem_json(i.problem),
    }


def report_json(
    results: list[ImageDrift],
    *,
    lockfile: str,
    fail_on: str,
    code: int,
    registry: dict[str, Any] | None = None,
    probes: int = 0,
    lock_arg: str | None = None,
    notes: list[str] | None = None,
    inspect_bytes: int | None = None,
) -> dict[str, Any]:
    """``registry``: ``ratelimit`` (stable) and ``stats`` (unstable: round trips, for
    benchmarks) from :func:`rocmenv.cli._common.registry_json`."""
    from rocmenv.drift.check import REPORT_VERSION, fails

    images = []
    for r in results:
        e = r.target.entry
        images.append(
            {
                "kind": r.target.kind,
                "key": r.target.key,
                "repository": e.repository,
                "tag": e.tag,
                "pinned_digest": e.digest,
                "pinned_platform_digest": e.platform_digest,
                "status": r.status,
                "fails": fails(r, fail_on),  # type: ignore[arg-type]
                "tag_state": r.tag_state,
                "moved": r.moved,
                "current_digest": r.current_digest,
                "newer": r.newer,
                "newer_basis": r.basis,
                "newer_tags": list(r.newer_tags),
                "newest": {"tag": r.newer_tags[0], "digest": r.newest_digest}
                if r.newer_tags
                else None,
                "notes": list(r.notes),
                "error": _problem_json(r.problem),
                "accept": accept_hint(r, lock_arg),
                "inspect": _inspect_json(r.inspection),
            }
        )
    errors = sum(1 for r in results if r.problem is not None)
    return {
        "report_version": REPORT_VERSION,
        "lockfile": lockfile,
        "fail_on": fail_on,
        "exit_code": code,
        "status": "incomplete"
        if errors
        else ("drift" if any(r.status == "drift" for r in results) else "ok"),
        "summary": _summary(results),
        "ratelimit": (registry or {}).get("ratelimit", []),
        "stats": (registry or {}).get("stats", {}),
        "probes": probes,
        "inspect_bytes": inspect_bytes,  # layer bytes read from the registry by --inspect
        "notes": list(notes or []),
        "images": images,
    }


def _summary(results: list[ImageDrift]) -> dict[str, int]:
    return {
        "images": len(results),
        "moved": sum(1 for r in results if r.moved),
        "newer": sum(1 for r in results if r.newer),
        "errors": sum(1 for r in results if r.problem is not None),
        "inspect_errors": sum(
            1 for r in results if r.inspection is not None and r.inspection.problem is not None
        ),
    }


def _headline(results: list[ImageDrift]) -> str:
    s = _summary(results)
    text = f"{s['images']} pinned image(s): {s['moved']} moved, {s['newer']} with newer tags"
    if s["errors"]:
        text += f", {s['errors']} could NOT be checked (incomplete: they may have drifted)"
    elif not s["moved"] and not s["newer"]:
        text += " — no drift"
    if s["inspect_errors"]:
        text += f", {s['inspect_errors']} inspection(s) failed"
    return text


def _versions(label: str, a: str | None, b: str | None) -> str:
    if a == b:
        return f"{label} {a or 'unknown'} (unchanged)"
    return f"{label} {a or 'unknown'} → {b or 'unknown'}"


# -- text -------------------------------------------------------------------------------------


def render_text(
    results: list[ImageDrift],
    *,
    lockfile: str,
    fail_on: str,
    lock_arg: str | None = None,
    notes: list[str] | None = None,
) -> str:
    lines = [f"rocmenv drift: {_headline(results)} ({lockfile}, --fail-on {fail_on})"]
    for r in results:
        label = {"ok": "ok", "drift": "DRIFT", "error": "ERROR"}[r.status]
        lines.append(f"{label:<6} {line_head(r)} [{_what(r)}]")
        e = r.target.entry
        if r.tag_state == "moved":
            lines.append(f"       moved: pinned {e.digest}")
            lines.append(f"              now    {r.current_digest}")
        lines.extend(f"       note: {note}" for note in r.notes)
        if r.newer:
            more = f" (+{len(r.newer_tags) - 1} more)" if len(r.newer_tags) > 1 else ""
            newest = shown(r.newer_tags[0])
            lines.append(
                f"       newer ({r.basis}): {newest}{more} → {shown(r.newest_digest or '')}"
            )
        if r.problem is not None:
            lines.append(f"       could not check: {shown(r.problem.message)}")
            if r.problem.hint:
                lines.append(f"       hint: {shown(r.problem.hint)}")
        if r.inspection is not None:
            lines.extend("       " + line for line in _inspection_text(r.inspection))
        hint = accept_hint(r, lock_arg)
        if hint:
            lines.append(f"       accept: {hint}")
    lines.extend(f"note: {shown(n)}" for n in notes or [])
    return "\n".join(lines) + "\n"


def _inspection_text(i: Inspection) -> list[str]:
    if i.problem is not None:
        out = [f"inspect failed ({i.against} image {i.new_reference}): {shown(i.problem.message)}"]
        return out + ([f"hint: {shown(i.problem.hint)}"] if i.problem.hint else [])
    assert i.pinned is not None and i.new is not None
    out = [
        f"inspected {i.new_reference} ({i.against}):",
        "  " + _versions("ROCm", i.pinned.rocm, i.new.rocm),
        "  " + _versions("Python", i.pinned.python, i.new.python),
    ]
    counts: dict[str, int] = {}
    for c in i.packages:
        counts[c.change] = counts.get(c.change, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no changes"
    out.append(f"  packages: {summary}")
    for c in i.packages:
        name, pinned, new = shown(c.name), shown(c.pinned or ""), shown(c.new or "")
        if c.change == "added":
            out.append(f"    + {name} {new}")
        elif c.change == "removed":
            out.append(f"    - {name} {pinned}")
        else:
            out.append(f"    ~ {name} {pinned} → {new}")
    if i.shims:
        out.append("  shims:")
        out.extend(f"    {s.name}: {shown(s.message)}" for s in i.shims)
    return out


# -- markdown ---------------------------------------------------------------------------------


def _md(text: object) -> str:
    """Text in a paragraph or a table cell: every markup character escaped."""
    return markdown_text(str(text))


def _code(text: object) -> str:
    return markdown_code(str(text)) if text not in (None, "") else "—"


def render_markdown(
    results: list[ImageDrift],
    *,
    lockfile: str,
    fail_on: str,
    lock_arg: str | None = None,
    notes: list[str] | None = None,
) -> str:
    out = [
        "## rocmenv drift",
        "",
        f"**{_md(_headline(results))}** — lockfile {_code(lockfile)}, `--fail-on {fail_on}`",
        "",
        "| image | pinned | status | newer |",
        "|---|---|---|---|",
    ]
    for r in results:
        newer = _code(r.newer_tags[0]) if r.newer else "—"
        if len(r.newer_tags) > 1:
            newer += f" (+{len(r.newer_tags) - 1})"
        who = subject(r) if r.target.kind == "profile" else "reference"
        out.append(f"| {_md(who)} | {_code(_pinned_ref(r))} | {_md(_what(r))} | {newer} |")
    for r in results:
        if r.status == "ok":
            continue
        out += ["", f"### {_md(subject(r))}: {_md(_what(r))}", ""]
        e = r.target.entry
        i = r.inspection
        facts = i is not None and i.problem is None and i.pinned is not None and i.new is not None
        out += ["| | pinned | now |", "|---|---|---|"]
        out.append(
            f"| reference | {_code(_pinned_ref(r))} | {_code(i.new_reference if i else '')} |"
        )
        out.append(f"| digest | {_code(e.digest)} | {_code(r.current_digest)} |")
        if r.newer:
            out.append(f"| newest tag | {_code(e.tag)} | {_code(r.newer_tags[0])} |")
            out.append(f"| newest digest | | {_code(r.newest_digest)} |")
        if facts:
            assert i is not None and i.pinned is not None and i.new is not None
            out.append(f"| ROCm | {_md(i.pinned.rocm or '?')} | {_md(i.new.rocm or '?')} |")
            out.append(f"| Python | {_md(i.pinned.python or '?')} | {_md(i.new.python or '?')} |")
        if r.problem is not None:
            out += ["", f"**Could not check:** {_md(r.problem.message)}"]
            if r.problem.hint:
                out.append(f"_hint: {_md(r.problem.hint)}_")
        out.extend(f"\n_note: {_md(n)}_" for n in r.notes)
        if i is not None and i.problem is not None:
            out += ["", f"**Inspection failed:** {_md(i.problem.message)}"]
        if facts:
            assert i is not None
            if i.shims:
                out += ["", "**Shims**", ""]
                out += [f"- {_code(s.name)}: {_md(s.message)}" for s in i.shims]
            out += [
                "",
                f"<details><summary>Package changes ({len(i.packages)})</summary>",
                "",
            ]
            if i.packages:
                out += ["| package | pinned | new | change |", "|---|---|---|---|"]
                out += [
                    f"| {_md(c.name)} | {_md(c.pinned or '—')} | {_md(c.new or '—')} | {c.change} |"
                    for c in i.packages
                ]
            else:
                out.append("No package changed.")
            out += ["", "</details>"]
        hint = accept_hint(r, lock_arg)
        if hint:
            out += ["", f"Accept: {_accept_text(hint)}"]
    if notes:
        out += [""] + [f"- note: {_md(n)}" for n in notes]
    return "\n".join(out) + "\n"


# -- GitHub annotations -----------------------------------------------------------------------
