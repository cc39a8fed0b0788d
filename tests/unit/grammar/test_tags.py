"""The rocm/sgl-dev tag grammar and tag selection, against the generated ground truth."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from rocmenv.grammar.tags import (
    Constraints,
    constraint_problem,
    nearest,
    parse_tag,
    rocm_version,
    select,
)
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


def _agrees(entry) -> None:  # type: ignore[no-untyped-def]
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
        if e.rocm == "7.2" and e.date < dt.date(2026, 6, 1)
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
