"""The rocm/sgl-dev tag grammar and tag selection, against the generated ground truth."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmenv.errors import UsageError
from rocmenv.grammar.tags import (
    Constraints,
    constraint_problem,
    failed_constraints,
    gpu_aliases_text,
    nearest,
    parse_tag,
    rocm_version,
    select,
    sglang_specifier,
)
from rocmenv.launcher._vendor.packaging.version import Version
from tests.support.tagset import generate_tagset

TAGSET = generate_tagset()


def test_tagset_is_large_and_covers_every_family() -> None:
    families = {e.family for e in TAGSET}
    assert len(TAGSET) >= 2500
    assert families == {"nightly", "release", "floating", "date-only", "unknown"}


def test_parser_agrees_with_ground_truth_on_every_generated_tag() -> None:
    mismatches = []
    for entry in TAGSET:
        try:
            _agrees(entry)
        except AssertionError as err:
            mismatches.append(f"{entry.tag}: {err}")
    assert not mismatches, "\n".join(mismatches[:20])


def _agrees(entry) -> None:
    info = parse_tag(entry.tag)
    assert info.family == entry.family, info.problem
    if entry.family == "unknown":
        assert info.problem
        return
    assert (info.sglang is None) == (entry.sglang is None)
    if entry.sglang:
        assert Version(info.sglang or "") == Version(entry.sglang)
    if entry.rocm:
        assert Version(info.rocm or "") == Version(entry.rocm)
    assert (info.gpu, info.gfx, info.suffix) == (entry.gpu, entry.gfx, entry.suffix)
    assert info.date == (entry.date.strftime("%Y%m%d") if entry.date else None)
    assert info.time == entry.time
    if entry.family == "floating":
        assert (info.project, info.moving) == (entry.project, entry.moving)


@pytest.mark.parametrize(
    ("code", "version"),
    [
        ("700", "7.0"),
        ("720", "7.2"),
        ("724", "7.2.4"),
        ("630", "6.3"),
        ("10", "10.0"),
        ("64", "6.4"),
        ("1010", "10.1"),
        ("7", None),
        ("99999", None),
    ],
)
def test_rocm_codes(code: str, version: str | None) -> None:
    assert rocm_version(code) == version


@pytest.mark.parametrize(
    "tag",
    [
        "v0.5.8-rocm700-mi30x-20260231",
        "v0.5.8-rocm7-mi30x",
        "20251301",
        "miles-rocm720-mi35x-202603012460",
        "v0.5.8-cu129",
        "sglang-v0.5.8",
    ],
)
def test_near_misses_are_unknown_with_a_reason(tag: str) -> None:
    info = parse_tag(tag)
    assert info.family == "unknown"
    assert info.problem


@given(st.text(max_size=60))
def test_parser_never_raises(text: str) -> None:
    assert parse_tag(text).family in {"nightly", "release", "floating", "date-only", "unknown"}


def _infos() -> list:  # type: ignore[type-arg]
    return [parse_tag(e.tag) for e in TAGSET]


def test_newest_nightly_is_chosen_by_date_not_version() -> None:
    infos = [
        parse_tag("v0.5.10-rocm720-mi35x-20260301"),
        parse_tag("v0.5.9-rocm720-mi35x-20260310"),  # older version, newer date
        parse_tag("v0.5.11-rocm720-mi35x"),  # a release: nightlies rank first
    ]
    best = select(infos, Constraints(rocm="7.2", gpu="mi35x"))[0]
    assert best.tag == "v0.5.9-rocm720-mi35x-20260310"


def test_releases_are_ordered_by_pep440_version() -> None:
    infos = [
        parse_tag(t)
        for t in (
            "v0.5.10rc0-rocm720-mi30x",
            "v0.5.9.post1-rocm720-mi30x",
            "v0.5.10-rocm720-mi30x",
            "v0.5.10.post1-rocm720-mi30x-srt",
        )
    ]
    order = [i.tag for i in select(infos, Constraints(family="release"))]
    assert order == [
        "v0.5.10.post1-rocm720-mi30x-srt",
        "v0.5.10-rocm720-mi30x",
        "v0.5.10rc0-rocm720-mi30x",
        "v0.5.9.post1-rocm720-mi30x",
    ]


def test_select_matches_ground_truth_for_constraints() -> None:
    infos = _infos()
    c = Constraints(rocm="7.2", gpu="mi35x", before="20260601")
    best = select(infos, c)[0]
    expected = [
        e
        for e in TAGSET.select(family="nightly", gpu="mi35x")
        if e.rocm == "7.2" and e.date is not None and e.date < dt.date(2026, 6, 1)
    ]
    newest = max(expected, key=lambda e: (e.date, e.suffix is None))
    assert best.tag == newest.tag


def test_sglang_specifier_filters_on_version() -> None:
    infos = _infos()
    for info in select(infos, Constraints(sglang=">=0.5.8,<0.5.10", family="nightly")):
        assert Version("0.5.8") <= Version(info.sglang or "") < Version("0.5.10")
    exact = select(infos, Constraints(sglang="0.5.8", family="release"))
    assert exact and all(Version(i.sglang or "") == Version("0.5.8") for i in exact)


def test_rocm_minor_matches_patch_releases() -> None:
    infos = [
        parse_tag("v0.5.8-rocm724-mi30x"),
        parse_tag("v0.5.8-rocm720-mi30x"),
        parse_tag("v0.5.8-rocm700-mi30x"),
    ]
    assert {i.tag for i in select(infos, Constraints(rocm="7.2"))} == {
        "v0.5.8-rocm724-mi30x",
        "v0.5.8-rocm720-mi30x",
    }
    assert [i.tag for i in select(infos, Constraints(rocm="7.2.4"))] == ["v0.5.8-rocm724-mi30x"]


def test_gfx_target_works_as_gpu_constraint() -> None:
    infos = [parse_tag("v0.5.8-rocm720-mi35x-20260301"), parse_tag("v0.5.8-rocm720-mi30x-20260302")]
    assert [i.tag for i in select(infos, Constraints(gpu="gfx950"))] == [
        "v0.5.8-rocm720-mi35x-20260301"
    ]


def test_floating_tags_only_when_asked_and_dated_siblings_first() -> None:
    infos = [
        parse_tag(t)
        for t in (
            "miles-rocm720-mi35x",
            "miles-rocm720-mi35x-20260301",
            "miles-rocm720-mi35x-202603021200",
        )
    ]
    assert select(infos, Constraints()) == []
    picked = select(infos, Constraints(family="floating", project="miles"))
    assert [i.tag for i in picked][:2] == [
        "miles-rocm720-mi35x-202603021200",
        "miles-rocm720-mi35x-20260301",
    ]


def test_nearest_names_the_failed_constraint() -> None:
    infos = [parse_tag("v0.5.8-rocm720-mi30x-20260301")]
    close = nearest(infos, Constraints(rocm="7.2", gpu="mi35x"))
    assert close[0][0].tag == "v0.5.8-rocm720-mi30x-20260301"
    assert close[0][1] == ["gpu"]


@pytest.mark.parametrize(
    ("alias", "family"),
    [("mi300x", "mi30x"), ("MI300A", "mi30x"), ("mi325x", "mi30x"), ("gfx942", "mi30x"),
     ("mi350x", "mi35x"), ("mi355x", "mi35x"), ("gfx950", "mi35x")],
)  # fmt: skip
def test_gpu_product_names_select_the_tags_of_their_family(alias: str, family: str) -> None:
    """sgl-dev tags say mi30x/mi35x; users say mi300x, mi355x or the gfx target."""
    infos = [parse_tag(t) for t in generate_tagset().tags]
    by_family = select(infos, Constraints(gpu=family, project=None))
    by_alias = select(infos, Constraints(gpu=alias, project=None))
    assert by_family and [i.tag for i in by_alias] == [i.tag for i in by_family]
    assert constraint_problem("gpu", alias) is None


def test_a_gfx_tag_matches_its_family_and_its_aliases() -> None:
    info = parse_tag("v0.5.8-rocm700-gfx942-20260215")
    for wanted in ("gfx942", "mi30x", "mi300x"):
        assert select([info], Constraints(gpu=wanted, project=None)) == [info], wanted
    assert select([info], Constraints(gpu="mi355x", project=None)) == []


# -- what a tag says (the fields of `tags parse --json`) -------------------------------------

NONE_FIELDS = dict.fromkeys(
    ("sglang", "rocm", "gpu", "gfx", "date", "time", "suffix", "project", "problem")
)


@pytest.mark.parametrize(
    ("tag", "fields"),
    [
        ("v0.5.8-rocm700-mi30x-20260215-preview",
         {"family": "nightly", "sglang": "0.5.8", "rocm": "7.0", "gpu": "mi30x", "gfx": "gfx942",
          "date": "20260215", "suffix": "preview", "project": "sglang"}),
        ("v0.5.8-rocm700-mi30x-202602151230",
         {"family": "nightly", "sglang": "0.5.8", "rocm": "7.0", "gpu": "mi30x", "gfx": "gfx942",
          "date": "20260215", "time": "1230", "project": "sglang"}),
        ("v0.5.8-rocm700-mi45x-20260215",
         {"family": "nightly", "sglang": "0.5.8", "rocm": "7.0", "gpu": "mi45x",
          "date": "20260215", "project": "sglang"}),
        ("v0.5.10rc0-rocm724-srt",
         {"family": "release", "sglang": "0.5.10rc0", "rocm": "7.2.4", "suffix": "srt",
          "project": "sglang"}),
        ("v0.5.8-rocm10-mi35x",
         {"family": "release", "sglang": "0.5.8", "rocm": "10.0", "gpu": "mi35x", "gfx": "gfx950",
          "project": "sglang"}),
        ("miles-rocm720-mi35x",
         {"family": "floating", "rocm": "7.2", "gpu": "mi35x", "gfx": "gfx950", "project": "miles",
          "moving": True}),
        ("latest-rocm720-gfx1151-202603022359",
         {"family": "floating", "rocm": "7.2", "gpu": "gfx1151", "gfx": "gfx1151",
          "date": "20260302", "time": "2359", "project": "latest"}),
        ("20250301-rc",
         {"family": "date-only", "date": "20250301", "suffix": "rc", "project": "sglang",
          "gpu": "mi30x", "gfx": "gfx942"}),
        ("v0.5.8-cu129",
         {"family": "unknown", "problem": "matches no known rocm/sgl-dev tag family"}),
    ],
)  # fmt: skip
def test_each_family_reports_every_field(tag: str, fields: dict[str, object]) -> None:
    info = parse_tag(tag)
    assert info.to_json() == {"tag": tag, **NONE_FIELDS, "moving": False, **fields}


@pytest.mark.parametrize(
    ("tag", "problem"),
    [
        ("v0.5.8-rocm700-mi30x-20260231", "20260231 is not a calendar date"),
        ("v0.5.8-rocm700-mi30x-202602152460", "202602152460 is not a calendar date"),
        ("v0.5.8-rocm9999-mi30x", "rocm9999 is not a ROCm version code"),
        ("v0.5.8-rocm9999-mi30x-20260215", "rocm9999 is not a ROCm version code"),
        ("miles-rocm720-mi35x-202603011260", "202603011260 is not a calendar date"),
        ("miles-rocm5000-mi35x", "rocm5000 is not a ROCm version code"),
        ("20251301-srt", "20251301 is not a calendar date"),
        ("sglang-v0.5.8", "matches no known rocm/sgl-dev tag family"),
    ],
)
def test_an_unknown_tag_is_kept_with_the_reason(tag: str, problem: str) -> None:
    info = parse_tag(tag)
    assert info.to_json() == {
        "tag": tag, **NONE_FIELDS, "family": "unknown", "moving": False, "problem": problem
    }  # fmt: skip


# -- constraints -------------------------------------------------------------------------------


def test_constraints_are_described_as_the_flags_that_give_them() -> None:
    c = Constraints(
        sglang=">=0.5",
        rocm="7.2",
        gpu="mi35x",
        family="nightly",
        before="20260301",
        project="miles",
    )
    assert c.describe() == (
        "--sglang >=0.5 --rocm 7.2 --gpu mi35x --family nightly --before 20260301 --project miles"
    )
    assert Constraints(rocm="7.2").describe() == "--rocm 7.2"  # the default project goes unsaid
    assert Constraints().describe() == "(no constraints)"
    assert Constraints(project=None).describe() == "(no constraints)"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("sglang", ">=0.5,<", "is not a PEP 440 specifier or version (e.g. '>=0.5.8,<0.6')"),
        ("rocm", "7.2.4.1", "is not a ROCm version (X.Y or X.Y.Z, e.g. 7.2)"),
        ("gpu", "h100", f"is not a GPU family ({gpu_aliases_text()}, ... or a gfx target)"),
        ("before", "2026-03-01", "is not a date (YYYYMMDD, e.g. 20260301)"),
        ("before", "19991231", "is not a date (YYYYMMDD, e.g. 20260301)"),
    ],
)
def test_a_bad_constraint_says_what_it_should_be(key: str, value: str, problem: str) -> None:
    assert constraint_problem(key, value) == problem


@pytest.mark.parametrize(
    ("key", "value"),
    [("sglang", "0.5.8"), ("sglang", ">=0.5.8,<0.6"), ("rocm", "7.2"), ("rocm", "10.1.2"),
     ("gpu", "MI355X"), ("gpu", "gfx1151"), ("before", "20260301"), ("family", "anything")],
)  # fmt: skip
def test_a_good_constraint_has_no_problem(key: str, value: str) -> None:
    assert constraint_problem(key, value) is None


def test_a_version_constraint_is_capped_at_256_characters() -> None:
    """Bounded before packaging compares it (a 5000-digit version broke int())."""
    at_cap, over = "10" + ".0" * 126, "100" + ".0" * 126  # "==" + 254 / 255 characters
    assert constraint_problem("sglang", at_cap) is None
    assert constraint_problem("sglang", over) is not None
    assert constraint_problem("sglang", "==" + "1" * 5000) is not None


def test_a_bad_sglang_specifier_is_a_usage_error_with_an_example() -> None:
    with pytest.raises(UsageError) as info:
        sglang_specifier("x" * 100)
    assert info.value.what == f"--sglang {'x' * 80!r} is not a PEP 440 version or specifier"
    assert info.value.hint == 'e.g. --sglang 0.5.8.post1 or --sglang ">=0.5.8,<0.6"'
    assert info.value.exit_code == 2


NIGHTLY = parse_tag("v0.5.8-rocm700-mi30x-20260215")
MILES = parse_tag("miles-rocm720-mi35x")


def test_every_constraint_a_tag_misses_is_named_in_order() -> None:
    c = Constraints(
        sglang=">=0.6", rocm="7.2", gpu="mi35x", family="release", before="20260101",
        project="miles",
    )  # fmt: skip
    assert failed_constraints(NIGHTLY, c) == [
        "family",
        "project",
        "sglang",
        "rocm",
        "gpu",
        "before",
    ]
    assert failed_constraints(parse_tag("v0.5.8-cu129"), c) == ["family"]
    assert failed_constraints(parse_tag("v0.5.8-cu129"), Constraints()) == ["family"]


def test_a_tag_of_another_project_misses_the_project() -> None:
    assert failed_constraints(NIGHTLY, Constraints(project="miles")) == ["project"]
    assert failed_constraints(NIGHTLY, Constraints(project=None)) == []
    assert failed_constraints(MILES, Constraints()) == ["family", "project"]
    assert failed_constraints(MILES, Constraints(family="nightly")) == ["family", "project"]


def test_floating_tags_of_any_project_when_floating_is_asked_for() -> None:
    """``--family floating`` alone means every project's floating tags (the default project
    is sglang, which builds none); naming a project still narrows them."""
    assert failed_constraints(MILES, Constraints(family="floating")) == []
    assert failed_constraints(MILES, Constraints(family="floating", project="latest")) == [
        "project"
    ]
    assert failed_constraints(MILES, Constraints(family="floating", sglang=">=0")) == ["sglang"]


def test_a_prerelease_sglang_is_inside_a_range() -> None:
    rc = parse_tag("v0.5.10rc0-rocm720-mi35x-20260301")
    assert failed_constraints(rc, Constraints(sglang=">=0.5.9")) == []
    assert failed_constraints(rc, Constraints(sglang="<0.5.10rc0")) == ["sglang"]


@pytest.mark.parametrize(
    ("tag", "rocm", "meets"),
    [("v0.5.8-rocm720-mi30x", "7.2.0", True), ("v0.5.8-rocm724-mi30x", "7.2.0", False),
     ("v0.5.8-rocm720-mi30x", "7.02", True), ("v0.5.8-rocm724-mi30x", "7.2", True),
     ("v0.5.8-rocm720-mi30x", "7.x", False), ("20250301", "7.0", False)],
)  # fmt: skip
def test_a_rocm_constraint_compares_versions_part_by_part(tag: str, rocm: str, meets: bool) -> None:
    """7.2 is 7.2.0; leading zeros do not count; a value no flag would accept (a hand-edited
    lockfile's ``7.x``) simply matches nothing."""
    assert failed_constraints(parse_tag(tag), Constraints(rocm=rocm)) == ([] if meets else ["rocm"])


def test_before_means_strictly_earlier_and_needs_a_date() -> None:
    assert failed_constraints(NIGHTLY, Constraints(before="20260216")) == []
    assert failed_constraints(NIGHTLY, Constraints(before="20260215")) == ["before"]
    release = parse_tag("v0.5.8-rocm700-mi30x")
    assert failed_constraints(release, Constraints(before="20260216")) == ["before"]


# -- ordering ----------------------------------------------------------------------------------


def _order(*tags: str, c: Constraints | None = None) -> list[str]:
    return [i.tag for i in select([parse_tag(t) for t in tags], c or Constraints())]


def test_releases_beat_date_only_tags() -> None:
    assert _order("20260301", "v0.5.8-rocm700-mi30x") == ["v0.5.8-rocm700-mi30x", "20260301"]


def test_a_plain_nightly_beats_its_srt_and_preview_builds_of_the_same_day() -> None:
    tags = ("v0.5.8-rocm720-mi30x-20260301-srt", "v0.5.8-rocm700-mi30x-20260301",
            "v0.5.8-rocm720-mi30x-20260301-preview")  # fmt: skip
    assert _order(*tags)[0] == "v0.5.8-rocm700-mi30x-20260301"


def test_the_newer_rocm_wins_by_version_not_by_spelling() -> None:
    """rocm10 (10.0) is newer than rocm700 (7.0), though "rocm1" sorts before "rocm7"."""
    nightlies = ("v0.5.8-rocm700-mi30x-20260301", "v0.5.8-rocm10-mi30x-20260301")
    assert _order(*nightlies)[0] == "v0.5.8-rocm10-mi30x-20260301"
    releases = ("v0.5.8-rocm700-mi30x", "v0.5.8-rocm10-mi30x")
    assert _order(*releases)[0] == "v0.5.8-rocm10-mi30x"


def test_a_release_for_a_gpu_beats_a_generic_one_and_a_plain_one_beats_srt() -> None:
    assert _order("v0.5.8-rocm720", "v0.5.8-rocm700-mi30x")[0] == "v0.5.8-rocm700-mi30x"
    assert _order("v0.5.8-rocm700-mi30x-srt", "v0.5.8-rocm720-mi30x")[0] == "v0.5.8-rocm720-mi30x"
    assert _order("v0.5.8-rocm720-mi30x-srt", "v0.5.8-rocm700-mi30x")[0] == "v0.5.8-rocm700-mi30x"


def test_nearest_misses_fewest_failures_first_then_newest() -> None:
    infos = [parse_tag(t) for t in (
        "v0.5.8-rocm720-mi30x-20260320",  # gpu and before
        "v0.5.8-cu129",                   # unknown: never a candidate
        "v0.5.8-rocm720-mi30x-20260301",  # gpu
        "v0.5.8-rocm720-mi35x-20260302",  # meets every constraint: not a miss
        "v0.5.8-rocm720-mi30x-20260310",  # gpu
        "v0.5.8-rocm720-mi30x-20260305",  # gpu
    )]  # fmt: skip
    close = nearest(infos, Constraints(gpu="mi35x", before="20260315"))
    assert [(i.tag, failed) for i, failed in close] == [
        ("v0.5.8-rocm720-mi30x-20260310", ["gpu"]),
        ("v0.5.8-rocm720-mi30x-20260305", ["gpu"]),
        ("v0.5.8-rocm720-mi30x-20260301", ["gpu"]),
    ]
    assert len(nearest(infos, Constraints(gpu="mi35x", before="20260315"), limit=4)) == 4


def test_nearest_ranks_families_as_select_does() -> None:
    """Among equal misses a date-only tag ranks above a newer floating one."""
    infos = [parse_tag("miles-rocm720-mi35x-20260301"), parse_tag("20250301")]
    close = nearest(infos, Constraints(family="nightly", project=None))
    assert [i.tag for i, _ in close] == ["20250301", "miles-rocm720-mi35x-20260301"]


def test_an_unknown_tag_is_never_a_near_miss() -> None:
    infos = [parse_tag("v0.5.8-cu129"), parse_tag("v0.5.8-rocm720-mi30x-20260301")]
    close = nearest(infos, Constraints(gpu="mi35x"), limit=10)
    assert [(i.tag, failed) for i, failed in close] == [("v0.5.8-rocm720-mi30x-20260301", ["gpu"])]


@pytest.mark.parametrize("year", [0, 1, 1900, 2000, 2023, 2024, 2100, 9999])
def test_a_calendar_date_is_valid_exactly_when_datetime_takes_it(year: int) -> None:
    from rocmenv.grammar.tags import _valid_date

    for month in range(14):
        for day in range(33):
            try:
                dt.date(year, month, day)
                real = True
            except ValueError:
                real = False
            assert _valid_date(f"{year:04d}{month:02d}{day:02d}", None) is real, (year, month, day)
