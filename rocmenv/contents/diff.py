"""Two images' contents compared: packages, ROCm, Python, shims; as JSON, text or markdown.

Package names and versions come from the images: the text shows them through
:func:`rocmenv.escape.shown`, the markdown as code spans and escaped text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rocmenv.escape import markdown_code, markdown_text, shown

Verdict = Literal["retire", "newly-needed", "still-needed", "not-needed", "unknown"]
Change = Literal["added", "removed", "upgraded", "downgraded", "changed"]


@dataclass(frozen=True, kw_only=True)
class PackageChange:
    name: str
    pinned: str | None
    new: str | None
    change: Change


@dataclass(frozen=True, kw_only=True)
class ShimChange:
    name: str
    pinned: bool | None  # would apply in the pinned image (None: unknown / not in the bundle)
    new: bool | None
    verdict: Verdict
    message: str


def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _direction(before: str, after: str) -> Change:
    from packaging.version import InvalidVersion, Version

    try:
        return "upgraded" if Version(after) > Version(before) else "downgraded"
    except InvalidVersion:
        return "changed"


def diff_packages(
    pinned: Mapping[str, str] | Sequence[tuple[str, str]],
    new: Mapping[str, str] | Sequence[tuple[str, str]],
) -> tuple[PackageChange, ...]:
    """Added, removed and changed distributions (names compared PEP 503-normalised)."""
    a = {
        _canonical(k): (k, v)
        for k, v in (pinned.items() if isinstance(pinned, Mapping) else pinned)
    }
    b = {_canonical(k): (k, v) for k, v in (new.items() if isinstance(new, Mapping) else new)}
    changes: list[PackageChange] = []
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            changes.append(
                PackageChange(name=a[key][0], pinned=a[key][1], new=None, change="removed")
            )
        elif key not in a:
            changes.append(
                PackageChange(name=b[key][0], pinned=None, new=b[key][1], change="added")
            )
        elif a[key][1] != b[key][1]:
            changes.append(
                PackageChange(
                    name=b[key][0],
                    pinned=a[key][1],
                    new=b[key][1],
                    change=_direction(a[key][1], b[key][1]),
                )
            )
    return tuple(changes)


def _shim_verdict(name: str, before: bool | None, after: bool | None) -> ShimChange:
    if before is True and after is False:
        verdict: Verdict = "retire"
        text = "needed in pinned image, not needed in new one: can be retired"
    elif before is False and after is True:
        verdict, text = (
            "newly-needed",
            "not needed in pinned image, needed in new one: newly needed",
        )
    elif before is True and after is True:
        verdict, text = "still-needed", "needed in both images"
    elif before is False and after is False:
        verdict, text = "not-needed", "needed in neither image"
    else:

        def say(v: bool | None) -> str:
            return {True: "needed", False: "not needed", None: "unknown"}[v]

        verdict = "unknown"
        text = (
            f"{say(before)} in pinned image, {say(after)} in new one (could not be told statically)"
        )
    return ShimChange(name=name, pinned=before, new=after, verdict=verdict, message=text)


def diff_shims(
    pinned: Sequence[tuple[str, bool | None]], new: Sequence[tuple[str, bool | None]]
) -> tuple[ShimChange, ...]:
    a, b = dict(pinned), dict(new)
    return tuple(_shim_verdict(n, a.get(n), b.get(n)) for n in sorted(a.keys() | b.keys()))


def _major_minor(version: str | None) -> tuple[int, ...] | None:
    from packaging.version import InvalidVersion, Version

    if version is None:
        return None
    try:
        return Version(version).release[:2]
    except InvalidVersion:
        return None


def diff_contents(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """``diff``'s JSON (``diff_version`` 1)."""
    packages = []
    for change in diff_packages(a.get("distributions") or {}, b.get("distributions") or {}):
        old_mm, new_mm = _major_minor(change.pinned), _major_minor(change.new)
        packages.append(
            {
                "name": change.name,
                "old": change.pinned,
                "new": change.new,
                "change": change.change,
                "major_minor": bool(old_mm and new_mm and old_mm != new_mm),
            }
        )

    def verdicts(doc: Mapping[str, Any]) -> list[tuple[str, bool | None]]:
        return [(str(s["name"]), s.get("would_apply")) for s in doc.get("shims") or []]

    shims = [
        {
            "name": s.name,
            "before": s.pinned,
            "after": s.new,
            "verdict": s.verdict,
            "message": s.message,
        }
        for s in diff_shims(verdicts(a), verdicts(b))
    ]
    return {
        "diff_version": 1,
        "a": {"image": a.get("image"), "digest": a.get("digest")},
        "b": {"image": b.get("image"), "digest": b.get("digest")},
        "rocm": {
            "a": (a.get("rocm") or {}).get("version"),
            "b": (b.get("rocm") or {}).get("version"),
        },
        "python": {
            "a": (a.get("python") or {}).get("version"),
            "b": (b.get("python") or {}).get("version"),
        },
        "packages": packages,
        "shims": shims,
    }


def _arrow(p: Mapping[str, Any]) -> str:
    name, old, new = shown(str(p["name"])), shown(str(p["old"])), shown(str(p["new"]))
    if p["change"] == "added":
        return f"+ {name} {new}"
    if p["change"] == "removed":
        return f"- {name} {old}"
    mark = " ⇑" if p["major_minor"] and p["change"] == "upgraded" else ""
    mark = " ⇓" if p["major_minor"] and p["change"] == "downgraded" else mark
    return f"~ {name} {old} → {new}{mark}"


def render_text(doc: Mapping[str, Any]) -> str:
    lines = [f"{shown(str(doc['a']['image']))} → {shown(str(doc['b']['image']))}"]
    for key, label in (("rocm", "ROCm"), ("python", "Python")):
        a, b = shown(str(doc[key]["a"])), shown(str(doc[key]["b"]))
        lines.append(f"  {label}: {a}" if a == b else f"  {label}: {a} → {b}")
    if not doc["packages"]:
        lines.append("  packages: no change")
    for p in doc["packages"]:
        lines.append("  " + _arrow(p))
    for s in doc["shims"]:
        lines.append(f"  shim {s['name']}: {shown(str(s['message']))}")
    retire = [s["name"] for s in doc["shims"] if s["verdict"] == "retire"]
    if retire:
        lines.append(f"  retire-able: {', '.join(retire)}")
    return "\n".join(lines)


def render_markdown(doc: Mapping[str, Any]) -> str:
    """Fits ``$GITHUB_STEP_SUMMARY``: a heading, a version table, a package table, shims."""
    out = [f"### {_code(doc['a']['image'])} → {_code(doc['b']['image'])}", ""]
    out += ["| | before | after |", "|---|---|---|"]
    for key, label in (("rocm", "ROCm"), ("python", "Python")):
        out.append(f"| {label} | {_text(doc[key]['a'] or '?')} | {_text(doc[key]['b'] or '?')} |")
    out.append("")
    if doc["packages"]:
        out += ["| package | before | after | |", "|---|---|---|---|"]
        for p in doc["packages"]:
            mark = {"added": "added", "removed": "removed"}.get(p["change"], p["change"])
            if p["major_minor"]:
                mark += " ⇑" if p["change"] == "upgraded" else " ⇓"
            out.append(
                f"| {_code(p['name'])} | {_text(p['old'] or '—')} | {_text(p['new'] or '—')} "
                f"| {mark} |"
            )
    else:
        out.append("No package changed.")
    if doc["shims"]:
        out += ["", "| shim | before | after | verdict |", "|---|---|---|---|"]
        say = {True: "needed", False: "not needed", None: "unknown"}
        for s in doc["shims"]:
            verdict = "**retire-able**" if s["verdict"] == "retire" else s["verdict"]
            out.append(
                f"| {_code(s['name'])} | {say[s['before']]} | {say[s['after']]} | {verdict} |"
            )
    return "\n".join(out) + "\n"


def _code(value: object) -> str:
    return markdown_code(str(value))


def _text(value: object) -> str:
    return markdown_text(str(value))
