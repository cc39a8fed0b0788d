"""The tag grammar of ``rocm/sgl-dev`` (and the ROCm tags of ``lmsysorg/sglang``).

Families (design.md §3):

- nightly   ``v<sglang>-rocm<NNN>-<gpu>-<YYYYMMDD>[-preview|-srt]``
- release   ``v<sglang>-rocm<NNN>[-<gpu>][-srt]``
- floating  project tags ``<project>-rocm<NNN>-<gpu>`` (``miles-…``, ``latest-…``: overwritten
  by nightly builds, ``moving``) and their dated siblings
  ``<project>-rocm<NNN>-<gpu>-<YYYYMMDD|YYYYMMDDHHMM>`` (not moving: pinnable by date)
- date-only ``YYYYMMDD[-srt|-rc|rc]`` (early 2025 builds, gfx942 only)
- unknown   anything else: kept and reported, never fatal.

``rocmNNN`` is ROCm N.N.N (``rocm700`` = 7.0, ``rocm724`` = 7.2.4, ``rocm10`` = 10.0).
Nightlies carry the latest *released* SGLang version at build time, so nightlies are ordered
by date and releases by PEP 440 version.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from rocmenv.lazy import Pattern
from rocmenv.record import record

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Literal

    Family = Literal["nightly", "release", "floating", "date-only", "unknown"]

FAMILY_NAMES: tuple[str, ...] = ("nightly", "release", "floating", "date-only", "unknown")

# GPU family of a tag → LLVM gfx target. Families seen in tags whose target we do not know
# for certain (mi45x) map to None; extend here when they are confirmed.
GPU_GFX: dict[str, str] = {"mi30x": "gfx942", "mi35x": "gfx950"}
GFX_GPU: dict[str, str] = {gfx: gpu for gpu, gfx in GPU_GFX.items()}
#: What users call a GPU (AMD's product names, the gfx target) → the family rocm/sgl-dev tags
#: use: ``--gpu mi300x`` means the ``mi30x`` tags.
GPU_ALIASES: dict[str, str] = {
    "mi300x": "mi30x", "mi300a": "mi30x", "mi325x": "mi30x", "gfx942": "mi30x",
    "mi350x": "mi35x", "mi355x": "mi35x", "gfx950": "mi35x",
}  # fmt: skip


def gpu_family(name: str) -> str:
    """The tag family a GPU name means (``mi300x`` → ``mi30x``); other names as they are."""
    lower = name.lower()
    return GPU_ALIASES.get(lower, lower)


def gpu_aliases_text() -> str:
    """``mi30x (mi300x, mi300a, mi325x, gfx942), mi35x (…)``, for help texts."""
    families = dict.fromkeys(GPU_ALIASES.values())
    return ", ".join(
        f"{fam} ({', '.join(a for a, f in GPU_ALIASES.items() if f == fam)})" for fam in families
    )


_SGLANG = r"(?P<sglang>[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?)"
_ROCM = r"rocm(?P<rocm>[0-9]{2,4})"
_GPU = r"(?P<gpu>mi[0-9]{2,3}x|gfx[0-9]{3,4}[a-z]?)"
_DATE = r"(?P<date>20[0-9]{6})(?P<time>[0-9]{4})?"

_NIGHTLY_RE = Pattern(rf"v{_SGLANG}-{_ROCM}-{_GPU}-{_DATE}(?:-(?P<suffix>preview|srt))?", re.ASCII)
_RELEASE_RE = Pattern(rf"v{_SGLANG}-{_ROCM}(?:-{_GPU})?(?:-(?P<suffix>srt))?", re.ASCII)
_PROJECT_RE = Pattern(rf"(?P<project>[a-z][a-z0-9]*)-{_ROCM}-{_GPU}(?:-{_DATE})?", re.ASCII)
_DATE_ONLY_RE = Pattern(r"(?P<date>20[0-9]{6})(?:-?(?P<suffix>srt|rc))?", re.ASCII)


@record
class TagInfo:
    tag: str
    family: Family
    sglang: str | None = None
    rocm: str | None = None  # "7.2", "7.2.4", "10.0"
    gpu: str | None = None  # "mi30x", "mi35x", "gfx1151"
    gfx: str | None = None  # "gfx942"
    date: str | None = None  # YYYYMMDD
    time: str | None = None  # HHMM, for YYYYMMDDHHMM siblings
    suffix: str | None = None  # "srt", "preview", "rc"
    project: str | None = None  # "sglang" for sglang builds, "miles", "latest", …
    moving: bool = False  # an undated floating tag: rebuilt and re-pointed every night
    problem: str | None = None  # for unknown tags: why

    @property
    def date_key(self) -> str:
        return (self.date or "00000000") + (self.time or "0000")

    def to_json(self) -> dict[str, str | bool | None]:
        return {
            "tag": self.tag,
            "family": self.family,
            "sglang": self.sglang,
            "rocm": self.rocm,
            "gpu": self.gpu,
            "gfx": self.gfx,
            "date": self.date,
            "time": self.time,
            "suffix": self.suffix,
            "project": self.project,
            "moving": self.moving,
            "problem": self.problem,
        }


@functools.lru_cache(maxsize=256)
def rocm_version(code: str) -> str | None:
    """``700`` → ``7.0``, ``720`` → ``7.2``, ``724`` → ``7.2.4``, ``10`` → ``10.0``, ``1010`` → ``10.1``."""
    if not code.isdigit():
        return None
    if len(code) == 2:
        parts = [code, "0"] if code[0] == "1" else [code[0], code[1]]
    elif len(code) == 3:
        parts = [code[0], code[1], code[2]]
    elif len(code) == 4 and code[0] == "1":
        parts = [code[:2], code[2], code[3]]
    else:
        return None
    if len(parts) == 3 and parts[2] == "0":
        parts = parts[:2]
    return ".".join(str(int(p)) for p in parts)


@functools.lru_cache(maxsize=4096)
def _valid_date(date: str, time: str | None) -> bool:
    """A real calendar day (``datetime.date``'s rule, without importing ``datetime``: ~1 ms
    on every run of a dated tag) and, when given, a time of day."""
    year, month, day = int(date[:4]), int(date[4:6]), int(date[6:8])
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    if not (year >= 1 and 1 <= month <= 12 and 1 <= day <= days[month - 1]):
        return False
    return time is None or (int(time[:2]) < 24 and int(time[2:]) < 60)


def _gfx(gpu: str | None) -> str | None:
    if gpu is None:
        return None
    return gpu if gpu.startswith("gfx") else GPU_GFX.get(gpu)


def parse_tag(tag: str) -> TagInfo:
    """Classify one tag. Never raises: what does not fit a family is ``unknown`` with a reason.

    Hot: ``tags list`` classifies thousands of tags per call, so each family's groups are read
    with one ``Match.group`` call and date/ROCm checks are memoised.
    """
    if m := _NIGHTLY_RE.fullmatch(tag):
        sglang, rocm, gpu, date, time, suffix = m.group(
            "sglang", "rocm", "gpu", "date", "time", "suffix"
        )
        problem = _check(rocm, date, time)
        if problem is None:
            return TagInfo(
                tag=tag,
                family="nightly",
                sglang=sglang,
                rocm=rocm_version(rocm),
                date=date,
                time=time,
                suffix=suffix,
                project="sglang",
                gpu=gpu,
                gfx=_gfx(gpu),
            )
        return TagInfo(tag=tag, family="unknown", problem=problem)
    if m := _RELEASE_RE.fullmatch(tag):
        sglang, rocm, gpu, suffix = m.group("sglang", "rocm", "gpu", "suffix")
        problem = _check(rocm, None, None)
        if problem is None:
            return TagInfo(
                tag=tag,
                family="release",
                sglang=sglang,
                rocm=rocm_version(rocm),
                suffix=suffix,
                project="sglang",
                gpu=gpu,
                gfx=_gfx(gpu),
            )
        return TagInfo(tag=tag, family="unknown", problem=problem)
    if m := _PROJECT_RE.fullmatch(tag):
        project, rocm, gpu, date, time = m.group("project", "rocm", "gpu", "date", "time")
        problem = _check(rocm, date, time)
        if problem is None:
            return TagInfo(
                tag=tag,
                family="floating",
                moving=date is None,
                rocm=rocm_version(rocm),
                date=date,
                time=time,
                project=project,
                gpu=gpu,
                gfx=_gfx(gpu),
            )
        return TagInfo(tag=tag, family="unknown", problem=problem)
    if m := _DATE_ONLY_RE.fullmatch(tag):
        date, suffix = m.group("date", "suffix")
        if _valid_date(date, None):
            return TagInfo(
                tag=tag,
                family="date-only",
                date=date,
                suffix=suffix,
                project="sglang",
                gpu="mi30x",
                gfx="gfx942",
            )
        return TagInfo(tag=tag, family="unknown", problem=f"{date} is not a calendar date")
    return TagInfo(tag=tag, family="unknown", problem="matches no known rocm/sgl-dev tag family")


def _check(rocm: str, date: str | None, time: str | None) -> str | None:
    # The SGLang version needs no check: the _SGLANG pattern only admits valid PEP 440 versions.
    if rocm_version(rocm) is None:
        return f"rocm{rocm} is not a ROCm version code"
    if date is not None and not _valid_date(date, time):
        return f"{date}{time or ''} is not a calendar date"
    return None


# -- selection --------------------------------------------------------------------------------


@record
class Constraints:
    sglang: str | None = None  # PEP 440 specifier, e.g. ">=0.5.8,<0.6" or "0.5.8" (== implied)
    rocm: str | None = None  # "7.2" matches 7.2 and 7.2.x; "7.2.4" only 7.2.4
    gpu: str | None = None  # "mi35x" or a gfx target ("gfx950")
    family: str | None = None  # one of FAMILY_NAMES minus unknown
    before: str | None = None  # YYYYMMDD: dated strictly before this day
    project: str | None = (
        "sglang"  # "sglang" builds by default; "miles", "latest", … or None for any
    )

    def describe(self) -> str:
        parts = [f"--{k} {v}" for k, v in self._items() if v is not None]
        return " ".join(parts) if parts else "(no constraints)"

    def _items(self) -> list[tuple[str, str | None]]:
        return [
            ("sglang", self.sglang),
            ("rocm", self.rocm),
            ("gpu", self.gpu),
            ("family", self.family),
            ("before", self.before),
            ("project", self.project if self.project != "sglang" else None),
        ]


#: Tag constraints as rocmenv can compare them (bounded: a 5000-digit version broke int()).
ROCM_CONSTRAINT = Pattern(r"[0-9]{1,4}(?:\.[0-9]{1,4}){0,2}", re.ASCII)
GPU_CONSTRAINT = Pattern(r"mi[0-9]{2,3}x|gfx[0-9]{3,4}[a-z]?", re.ASCII)


def _specifier_set(text: str) -> object | None:
    """The SpecifierSet ``text`` means (a bare version: ``==``), or ``None`` if it is not one
    (checked by comparing once: a version too long for int() only fails there)."""
    from rocmenv.launcher._vendor.packaging.specifiers import SpecifierSet

    spec_text = text.strip()
    if spec_text and spec_text[0].isdigit():
        spec_text = "==" + spec_text
    if len(spec_text) > 256:
        return None
    try:
        spec = SpecifierSet(spec_text)
        # A second guard: equivalent while the cap above holds (int() fails past 4300 digits).
        spec.contains("0", prereleases=True)  # pragma: no mutate
    except ValueError:  # InvalidSpecifier, and int() limits
        return None
    return spec


def sglang_specifier(text: str) -> object:
    """A bare version means ``==``; otherwise a PEP 440 specifier set."""
    from rocmenv.errors import UsageError

    spec = _specifier_set(text)
    if spec is None:
        raise UsageError(
            f"--sglang {text[:80]!r} is not a PEP 440 version or specifier",
            hint='e.g. --sglang 0.5.8.post1 or --sglang ">=0.5.8,<0.6"',
        ) from None
    return spec


def constraint_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not a valid ``key`` constraint (sglang, rocm, gpu, before), or None."""
    if key == "sglang" and _specifier_set(value) is None:
        return "is not a PEP 440 specifier or version (e.g. '>=0.5.8,<0.6')"
    if key == "rocm" and not ROCM_CONSTRAINT.fullmatch(value):
        return "is not a ROCm version (X.Y or X.Y.Z, e.g. 7.2)"
    if key == "gpu" and not (
        value.lower() in GPU_ALIASES or GPU_CONSTRAINT.fullmatch(value.lower())
    ):
        return f"is not a GPU family ({gpu_aliases_text()}, ... or a gfx target)"
    if key == "before" and not re.fullmatch(r"20[0-9]{6}", value):
        return "is not a date (YYYYMMDD, e.g. 20260301)"
    return None


def failed_constraints(info: TagInfo, c: Constraints) -> list[str]:
    """The names of the constraints ``info`` does not meet (empty: it matches)."""
    failed: list[str] = []
    if info.family == "unknown":
        return ["family"]
    if c.family is not None:
        if info.family != c.family:
            failed.append("family")
    elif info.family == "floating":
        failed.append("family")  # floating tags move: only when asked for explicitly
    if (
        c.project is not None
        and info.project != c.project
        and not (c.family == "floating" and c.project == "sglang")
    ):
        failed.append("project")
    if c.sglang is not None:
        from rocmenv.launcher._vendor.packaging.specifiers import SpecifierSet
        from rocmenv.launcher._vendor.packaging.version import Version

        spec = sglang_specifier(c.sglang)
        assert isinstance(spec, SpecifierSet)
        if info.sglang is None or not spec.contains(Version(info.sglang), prereleases=True):
            failed.append("sglang")
    if c.rocm is not None:
        want = [str(int(p)) if p.isdigit() else p for p in c.rocm.split(".")]
        have = info.rocm.split(".") if info.rocm else []
        if len(have) == 2:
            have.append("0")
        if have[: len(want)] != want:
            failed.append("rocm")
    if c.gpu is not None:
        family = gpu_family(c.gpu)  # an alias (mi300x, gfx942) means its family's tags
        if not any(g is not None and gpu_family(g) == family for g in (info.gpu, info.gfx)):
            failed.append("gpu")
    if c.before is not None and (info.date is None or info.date >= c.before):
        failed.append("before")
    return failed


@functools.lru_cache(maxsize=1024)
def _version(text: str) -> object:
    from rocmenv.launcher._vendor.packaging.version import Version

    return Version(text)


#: Families from the best down (unknown tags are never sorted: they match nothing).
_FAMILY_RANK: dict[str, int] = {
    "nightly": 3, "release": 2, "date-only": 1, "floating": 0, "unknown": -1
}  # fmt: skip


def sort_key(info: TagInfo) -> tuple[int, str, object]:
    """Newest first when sorted in reverse: nightlies by date, releases by version."""
    rank = _FAMILY_RANK[info.family]
    rocm = _version(info.rocm or "0")
    if info.family == "release" and info.sglang:
        # Among releases: version, then GPU-specific before generic, without -srt, newer ROCm.
        release = (_version(info.sglang), info.gpu is not None, info.suffix is None, rocm, info.tag)
        return (rank, "", release)  # pragma: no mutate  (no other family has this rank)
    # Same date: a plain build before -preview/-srt, then the newer ROCm.
    return (rank, info.date_key, (info.suffix is None, rocm, info.tag))


def warm_up() -> None:
    """Compile what classifying and sorting a tag list first pays for (the tag patterns,
    ``packaging``'s ``Version``: ~10 ms): ``tags list`` runs it on a thread while the list is
    on its way, so the work overlaps the network instead of following it."""
    for pattern in (_NIGHTLY_RE, _RELEASE_RE, _PROJECT_RE, _DATE_ONLY_RE):
        pattern.compiled  # noqa: B018 - compiles it
    _version("0")


def select(infos: Iterable[TagInfo], c: Constraints) -> list[TagInfo]:
    """Matching tags, best first. Without ``family``: nightlies (newest date) beat releases
    (highest version), which beat date-only tags; floating tags only when asked for."""
    matching = [i for i in infos if not failed_constraints(i, c)]
    return sorted(matching, key=sort_key, reverse=True)


def nearest(
    infos: Sequence[TagInfo], c: Constraints, limit: int = 3
) -> list[tuple[TagInfo, list[str]]]:
    """Closest misses: fewest failed constraints, then newest."""
    scored = []
    for info in infos:
        if info.family == "unknown":
            continue
        failed = failed_constraints(info, c)
        if failed:
            scored.append((len(failed), info, failed))
    scored.sort(key=lambda item: (item[0], _neg(sort_key(item[1]))))
    return [(info, failed) for _, info, failed in scored[:limit]]


class _Reversed:
    # pragmas below: a tuple compares its items with == first and asks < only of the first
    # pair that differs, where < and <= agree; keys equal to == are neither less either way,
    # so a sort reads the same order from any answer of __eq__ (equivalent mutants)
    def __init__(self, key: object) -> None:
        self.key = key

    def __lt__(self, other: _Reversed) -> bool:
        return bool(other.key < self.key)  # type: ignore[operator]  # pragma: no mutate

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and bool(self.key == other.key)  # pragma: no mutate

    __hash__ = None  # type: ignore[assignment]


def _neg(key: object) -> _Reversed:
    return _Reversed(key)
