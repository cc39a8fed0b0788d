"""A deterministic, realistic ``rocm/sgl-dev`` tag set with the expected parse of every tag.

``generate_tagset()`` returns ~3000 :class:`ExpectedTag` entries (the ``tagset`` fixture);
``generate_tags()`` just their names. ``scripts/setup.sh`` pushes exactly this set to
``127.0.0.1:5000/rocm/sgl-dev`` (the family images of ``images/family.toml`` are among
them), so parser, resolver and listing tests can compare against ground truth.

Families (design.md §3), and what the expectation holds for each:

==========  =====================================================  =========================
family      shape                                                  fields set
==========  =====================================================  =========================
nightly     ``v<sglang>-rocm<NNN>-<gpu>-<YYYYMMDD>[-preview|-srt]``   sglang rocm gpu date suffix
release     ``v<sglang>-rocm<NNN>[-<gpu>][-srt]``                  sglang rocm [gpu] suffix
floating    ``miles|latest-rocm<NNN>-<gpu>``  (moves every night)  project rocm gpu
floating    ``miles-rocm<NNN>-<gpu>-<YYYYMMDD|YYYYMMDDHHMM>``       project rocm gpu date [time]
date-only   ``YYYYMMDD[-srt|rc]`` (2025, gfx942 only)              date suffix, gpu=mi30x implied
unknown     junk (``test``, ``tmp-build-1a2b3c``, near misses)      nothing
==========  =====================================================  =========================

Conventions of the expectations:

* ``sglang`` is the version as spelled in the tag without the ``v`` (``0.5.10rc0``); compare
  with ``packaging.version.Version``.
* ``rocm`` follows design.md: ``rocm700`` → ``"7.0"``, ``rocm720`` → ``"7.2"``,
  ``rocm724`` → ``"7.2.4"``, ``rocm630`` → ``"6.3"``, ``rocm10`` → ``"10.0"`` (compare with
  ``Version``: ``Version("7.0") == Version("7.0.0")``); ``rocm_code`` is the raw digits.
* ``gfx``: ``mi30x`` → ``gfx942``, ``mi35x`` → ``gfx950``, ``gfx1151`` → ``gfx1151``;
  ``mi45x`` is not in the catalogue → ``None``. Releases without a GPU part: both ``None``.
* ``date`` is a :class:`datetime.date`; ``time`` is ``"HHMM"`` for the 12-digit siblings.
* Nightlies carry the latest sglang *released* at their date (:data:`SGLANG_RELEASES`), so
  nightlies must be ordered by date, not by version.
* ``index`` says the tag is pushed as an OCI image index (linux/amd64 + an attestation
  manifest, as buildx pushes) rather than a single image manifest: release tags are.
* ``moving`` is true for the floating tags that have no date.
"""

from __future__ import annotations

import datetime as _dt
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FAMILY_IMAGE_TAGS",
    "GFX_OF_GPU",
    "SGLANG_RELEASES",
    "ExpectedTag",
    "TagSet",
    "expected_for",
    "generate_tags",
    "generate_tagset",
    "rocm_version_of_code",
    "sglang_at",
]

Family = Literal["nightly", "release", "floating", "date-only", "unknown"]

DEFAULT_SEED = 20260215
NIGHTLY_START = _dt.date(2025, 6, 1)
NIGHTLY_END = _dt.date(2026, 11, 30)
DATE_ONLY_START = _dt.date(2025, 1, 2)
DATE_ONLY_END = _dt.date(2025, 5, 31)

GFX_OF_GPU: dict[str, str | None] = {
    "mi30x": "gfx942",
    "mi35x": "gfx950",
    "mi45x": None,
    "gfx1151": "gfx1151",
}

# (version, release date). Nightlies built on or after the date carry the version.
SGLANG_RELEASES: tuple[tuple[str, _dt.date], ...] = tuple(
    (v, _dt.date.fromisoformat(d))
    for v, d in (
        ("0.4.6.post5", "2025-05-20"),
        ("0.4.7", "2025-06-10"),
        ("0.4.7.post1", "2025-06-16"),
        ("0.4.8", "2025-06-24"),
        ("0.4.8.post1", "2025-06-27"),
        ("0.4.9", "2025-07-06"),
        ("0.4.9.post1", "2025-07-10"),
        ("0.4.9.post2", "2025-07-15"),
        ("0.4.10", "2025-07-27"),
        ("0.4.10.post1", "2025-07-31"),
        ("0.4.10.post2", "2025-08-05"),
        ("0.5.0rc0", "2025-08-12"),
        ("0.5.0rc1", "2025-08-18"),
        ("0.5.0rc2", "2025-08-25"),
        ("0.5.1", "2025-09-03"),
        ("0.5.1.post3", "2025-09-08"),
        ("0.5.2", "2025-09-15"),
        ("0.5.3", "2025-10-03"),
        ("0.5.3.post1", "2025-10-08"),
        ("0.5.4", "2025-10-25"),
        ("0.5.4.post1", "2025-11-01"),
        ("0.5.5", "2025-11-10"),
        ("0.5.5.post2", "2025-11-20"),
        ("0.5.6", "2025-12-05"),
        ("0.5.6.post1", "2025-12-20"),
        ("0.5.7", "2026-01-05"),
        ("0.5.8", "2026-01-20"),
        ("0.5.8.post1", "2026-02-18"),
        ("0.5.9", "2026-02-27"),
        ("0.5.10rc0", "2026-03-10"),
        ("0.5.10", "2026-03-25"),
        ("0.5.10.post1", "2026-04-05"),
        ("0.5.11", "2026-04-28"),
        ("0.5.12", "2026-05-18"),
        ("0.5.12.post1", "2026-05-23"),
        ("0.5.13", "2026-05-29"),
        ("0.5.14", "2026-06-20"),
        ("0.5.15", "2026-07-15"),
        ("0.5.16", "2026-08-05"),
        ("0.5.17", "2026-08-25"),
        ("0.5.18", "2026-09-15"),
        ("0.5.19", "2026-10-05"),
        ("0.5.20", "2026-10-25"),
        ("0.5.21rc0", "2026-11-10"),
        ("0.5.21", "2026-11-20"),
    )
)

# Which (rocm code, gpu) nightly streams exist when: (code, gpu, first day, last day, share of days).
_NIGHTLY_STREAMS: tuple[tuple[str, str, _dt.date, _dt.date, float], ...] = (
    ("630", "mi30x", _dt.date(2025, 6, 1), _dt.date(2025, 10, 31), 0.85),
    ("700", "mi30x", _dt.date(2025, 7, 1), _dt.date(2026, 6, 30), 0.85),
    ("700", "mi35x", _dt.date(2025, 8, 15), _dt.date(2026, 4, 30), 0.8),
    ("720", "mi30x", _dt.date(2026, 1, 10), NIGHTLY_END, 0.75),
    ("720", "mi35x", _dt.date(2026, 1, 10), NIGHTLY_END, 0.85),
    ("724", "mi30x", _dt.date(2026, 7, 1), NIGHTLY_END, 0.6),
    ("724", "mi35x", _dt.date(2026, 7, 1), NIGHTLY_END, 0.8),
    ("10", "mi35x", _dt.date(2026, 9, 1), NIGHTLY_END, 0.6),
    ("10", "mi45x", _dt.date(2026, 10, 1), NIGHTLY_END, 0.15),
    ("720", "gfx1151", _dt.date(2026, 3, 1), _dt.date(2026, 8, 31), 0.05),
)

# The rocm/sgl-dev images of images/family.toml: always in the set, consistent with it.
FAMILY_IMAGE_TAGS: tuple[str, ...] = (
    "v0.5.8-rocm700-mi30x-20260215",
    "v0.5.13-rocm720-mi35x-20260601",
    "v0.5.6-rocm700-mi30x-20251215",
    "miles-rocm720-mi35x-20260301",
    "miles-rocm720-mi35x",
)

_JUNK_FIXED: tuple[str, ...] = (
    "test",
    "buildcache",
    "tmp",
    "dev",
    "nightly",
    "cache-rocm700",
    "rocm700-mi30x",
    "v0.5.x-rocm700-mi30x",
    "v0.5.8-rocm700-mi30x-2026021",
    "v0.5.8-mi30x-20260215",
    "sglang-v0.5.8",
    "20259999",
    "miles-mi35x",
    "latest",
)


@dataclass(frozen=True, kw_only=True)
class ExpectedTag:
    """One tag and what a correct parser says about it."""

    tag: str
    family: Family
    sglang: str | None = None
    rocm: str | None = None
    rocm_code: str | None = None
    gpu: str | None = None
    gfx: str | None = None
    date: _dt.date | None = None
    time: str | None = None
    suffix: str | None = None
    project: str | None = None
    moving: bool = False
    index: bool = False

    @property
    def parsed(self) -> bool:
        return self.family != "unknown"


@dataclass(frozen=True, kw_only=True)
class TagSet:
    """The generated tags in push order, with lookups."""

    seed: int
    entries: tuple[ExpectedTag, ...]

    @property
    def tags(self) -> list[str]:
        return [e.tag for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def __getitem__(self, tag: str) -> ExpectedTag:
        for e in self.entries:
            if e.tag == tag:
                return e
        raise KeyError(tag)

    def by_family(self, family: Family) -> list[ExpectedTag]:
        return [e for e in self.entries if e.family == family]

    def select(self, **fields: object) -> list[ExpectedTag]:
        """Entries whose attributes equal every given value: ``select(family="nightly", gpu="mi35x")``."""
        return [e for e in self.entries if all(getattr(e, k) == v for k, v in fields.items())]


def rocm_version_of_code(code: str) -> str:
    """``"700"`` → ``"7.0"``, ``"724"`` → ``"7.2.4"``, ``"10"`` → ``"10.0"`` (design.md §3)."""
    if len(code) == 3:
        major, minor, patch = code[0], code[1], code[2]
        return f"{major}.{minor}" if patch == "0" else f"{major}.{minor}.{patch}"
    if len(code) == 2:
        return f"{int(code)}.0"
    raise ValueError(f"unknown ROCm code {code!r}")


def sglang_at(day: _dt.date) -> str:
    """The latest sglang released on or before ``day`` (what a nightly of that day carries)."""
    current = SGLANG_RELEASES[0][0]
    for version, released in SGLANG_RELEASES:
        if released <= day:
            current = version
    return current


def _ymd(day: _dt.date) -> str:
    return day.strftime("%Y%m%d")


def _days(start: _dt.date, end: _dt.date) -> Iterable[_dt.date]:
    day = start
    while day <= end:
        yield day
        day += _dt.timedelta(days=1)


def _nightly(sglang: str, code: str, gpu: str, day: _dt.date, suffix: str | None) -> ExpectedTag:
    tag = f"v{sglang}-rocm{code}-{gpu}-{_ymd(day)}" + (f"-{suffix}" if suffix else "")
    return ExpectedTag(
        tag=tag,
        family="nightly",
        sglang=sglang,
        rocm=rocm_version_of_code(code),
        rocm_code=code,
        gpu=gpu,
        gfx=GFX_OF_GPU[gpu],
        date=day,
        suffix=suffix,
    )


def _release(sglang: str, code: str, gpu: str | None, suffix: str | None) -> ExpectedTag:
    tag = f"v{sglang}-rocm{code}" + (f"-{gpu}" if gpu else "") + (f"-{suffix}" if suffix else "")
    return ExpectedTag(
        tag=tag,
        family="release",
        sglang=sglang,
        rocm=rocm_version_of_code(code),
        rocm_code=code,
        gpu=gpu,
        gfx=GFX_OF_GPU[gpu] if gpu else None,
        suffix=suffix,
        index=True,
    )


def _floating(
    project: str, code: str, gpu: str, day: _dt.date | None, time: str | None
) -> ExpectedTag:
    tag = f"{project}-rocm{code}-{gpu}"
    if day is not None:
        tag += f"-{_ymd(day)}" + (time or "")
    return ExpectedTag(
        tag=tag,
        family="floating",
        rocm=rocm_version_of_code(code),
        rocm_code=code,
        gpu=gpu,
        gfx=GFX_OF_GPU[gpu],
        date=day,
        time=time,
        project=project,
        moving=day is None,
    )


def _date_only(day: _dt.date, suffix: str | None) -> ExpectedTag:
    return ExpectedTag(
        tag=_ymd(day) + (f"-{suffix}" if suffix else ""),
        family="date-only",
        gpu="mi30x",
        gfx="gfx942",
        date=day,
        suffix=suffix,
    )


def _released_between(start: _dt.date, end: _dt.date) -> list[str]:
    return [v for v, d in SGLANG_RELEASES if start <= d <= end]


Add = Callable[[ExpectedTag], None]


def generate_tagset(seed: int = DEFAULT_SEED) -> TagSet:
    """The whole tag set, deterministic for a seed (about 3000 tags). Each part draws from
    the one generator in this order: changing the order changes every tag after it."""
    rng = random.Random(seed)
    out: dict[str, ExpectedTag] = {}

    def add(e: ExpectedTag) -> None:
        out.setdefault(e.tag, e)

    _add_date_only(rng, add)
    _add_nightlies(rng, add)
    _add_releases(rng, add)
    _add_floating(rng, add)
    # the family images (setup.sh builds these; the rest are small stand-ins)
    for tag in FAMILY_IMAGE_TAGS:
        expected = expected_for(tag)
        if expected is None:  # pragma: no cover - guarded by tests/support/test_testenv.py
            raise AssertionError(f"family tag {tag} is not consistent with the tag set rules")
        out[tag] = expected
    _add_junk(rng, add, lambda: len(out))
    entries = list(out.values())
    rng.shuffle(entries)
    return TagSet(seed=seed, entries=tuple(entries))


def _add_date_only(rng: random.Random, add: Add) -> None:
    """Early date-only tags (2025, gfx942 only)."""
    for day in _days(DATE_ONLY_START, DATE_ONLY_END):
        if rng.random() < 0.9:
            add(_date_only(day, None))
            if rng.random() < 0.6:
                add(_date_only(day, "srt"))
            if rng.random() < 0.04:
                add(_date_only(day, "rc"))


def _add_nightlies(rng: random.Random, add: Add) -> None:
    for day in _days(NIGHTLY_START, NIGHTLY_END):
        sglang = sglang_at(day)
        for code, gpu, first, last, share in _NIGHTLY_STREAMS:
            if not (first <= day <= last) or rng.random() >= share:
                continue
            add(_nightly(sglang, code, gpu, day, None))
            if gpu in ("mi30x", "mi35x") and rng.random() < 0.4:
                add(_nightly(sglang, code, gpu, day, "srt"))
            if rng.random() < 0.04:
                add(_nightly(sglang, code, gpu, day, "preview"))


def _add_releases(rng: random.Random, add: Add) -> None:
    """Every released version with the ROCm streams alive at its date."""
    for version, released in SGLANG_RELEASES:
        if released < NIGHTLY_START:
            continue
        for code, gpu, first, last, _share in _NIGHTLY_STREAMS:
            if gpu not in ("mi30x", "mi35x") or not (first <= released <= last):
                continue
            add(_release(version, code, gpu, None))
            if rng.random() < 0.5:
                add(_release(version, code, gpu, "srt"))
            if gpu == "mi30x" and code in ("630", "700") and rng.random() < 0.5:
                add(_release(version, code, None, None))


def _add_floating(rng: random.Random, add: Add) -> None:
    """Floating project tags and their dated siblings."""
    for project, code, gpu in (
        ("miles", "720", "mi35x"),
        ("miles", "700", "mi30x"),
        ("miles", "720", "mi30x"),
        ("latest", "700", "mi30x"),
        ("latest", "700", "mi35x"),
        ("latest", "720", "mi35x"),
        ("latest", "724", "mi35x"),
        ("latest", "10", "mi35x"),
    ):
        add(_floating(project, code, gpu, None, None))
    for day in _days(_dt.date(2026, 1, 15), NIGHTLY_END):
        if rng.random() < 0.7:
            add(_floating("miles", "720", "mi35x", day, None))
        if rng.random() < 0.15:
            add(
                _floating(
                    "miles", "720", "mi35x", day, f"{rng.randrange(24):02d}{rng.randrange(60):02d}"
                )
            )
        if day >= _dt.date(2026, 9, 1) and rng.random() < 0.35:
            add(_floating("miles", "720", "mi30x", day, None))


def _add_junk(rng: random.Random, add: Add, size: Callable[[], int]) -> None:
    """~2% junk: fixed near misses plus random build leftovers."""
    for tag in _JUNK_FIXED:
        add(ExpectedTag(tag=tag, family="unknown"))
    n_random_junk = max(0, int(size() * 0.02) - len(_JUNK_FIXED))
    for _ in range(n_random_junk):
        kind = rng.choice(("tmp-build-", "ci-", "pr-", "sha-", "test-"))
        add(
            ExpectedTag(
                tag=kind + f"{rng.getrandbits(32):08x}"[: rng.choice((6, 7, 8))], family="unknown"
            )
        )


def generate_tags(seed: int = DEFAULT_SEED) -> list[str]:
    """Just the tag names of :func:`generate_tagset`."""
    return generate_tagset(seed).tags


def expected_for(tag: str) -> ExpectedTag | None:
    """The expectation for a well-formed tag built by the rules above, else ``None``.

    Used to keep the family images' tags consistent with the generator (a nightly's sglang
    must be the one released at its date). Not a parser: it only re-derives known shapes.
    """
    parts = tag.split("-")
    if parts[0] in ("miles", "latest") and len(parts) in (3, 4) and parts[1].startswith("rocm"):
        code, gpu = parts[1][4:], parts[2]
        if gpu not in GFX_OF_GPU:
            return None
        if len(parts) == 3:
            return _floating(parts[0], code, gpu, None, None)
        stamp = parts[3]
        day = _dt.datetime.strptime(stamp[:8], "%Y%m%d").date()
        return _floating(parts[0], code, gpu, day, stamp[8:] or None)
    if tag.startswith("v") and len(parts) >= 4 and parts[1].startswith("rocm"):
        sglang, code, gpu = parts[0][1:], parts[1][4:], parts[2]
        day = _dt.datetime.strptime(parts[3], "%Y%m%d").date()
        suffix = parts[4] if len(parts) > 4 else None
        if sglang != sglang_at(day) or gpu not in GFX_OF_GPU:
            return None
        return _nightly(sglang, code, gpu, day, suffix)
    return None


def _check_unique(entries: Sequence[ExpectedTag]) -> None:  # pragma: no cover - debug aid
    seen = {e.tag for e in entries}
    assert len(seen) == len(entries)
