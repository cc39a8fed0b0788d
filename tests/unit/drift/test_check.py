"""rocmenv.drift: what counts as newer, package and shim diffs, exit codes, the probe cache."""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmenv.contents.diff import diff_packages, diff_shims
from rocmenv.drift.check import (
    ImageDrift,
    ImageFacts,
    Inspection,
    Problem,
    Target,
    accept_command,
    exit_code,
    fails,
    newer_than_pin,
    targets,
)
from rocmenv.drift.inspect import ProbeCache, compare, facts_from_probe
from rocmenv.errors import UsageError
from rocmenv.grammar.tags import parse_tag
from rocmenv.image.lock import Lock, LockEntry

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64


def entry(tag: str | None = "t", constraints: dict[str, str] | None = None) -> LockEntry:
    return LockEntry(
        repository="docker.io/rocm/sgl-dev",
        tag=tag,
        digest=D1,
        media_type="application/vnd.oci.image.index.v1+json",
        platform="linux/amd64",
        platform_digest=D2,
        resolved_at="2026-06-01T10:00:00Z",
        constraints=tuple(sorted((constraints or {}).items())),
    )


def infos(*tags: str) -> list[Any]:
    return [parse_tag(t) for t in tags]


def newer(pinned: LockEntry, *tags: str) -> tuple[str, list[str], str]:
    basis, found, note = newer_than_pin(pinned, infos(*tags))
    return basis, [t.tag for t in found], note


# -- what "newer" means ------------------------------------------------------------------------


def test_newer_nightly_means_later_date_same_rocm_gpu_suffix_any_sglang() -> None:
    pinned = entry("v0.5.8-rocm700-mi30x-20260215")
    basis, found, _ = newer(
        pinned,
        "v0.5.8-rocm700-mi30x-20260215",
        "v0.5.8-rocm700-mi30x-20260214",  # older
        "v0.5.9-rocm700-mi30x-20260301",  # newer, new sglang release: still newer
        "v0.5.8-rocm700-mi30x-20260220",
        "v0.5.8-rocm720-mi30x-20260301",  # other ROCm
        "v0.5.8-rocm700-mi35x-20260301",  # other GPU
        "v0.5.8-rocm700-mi30x-20260301-srt",  # other suffix
        "v0.5.9-rocm700-mi30x",  # a release, not a nightly
        "miles-rocm700-mi30x-20260301",
    )
    assert basis == "nightly"
    assert found == ["v0.5.9-rocm700-mi30x-20260301", "v0.5.8-rocm700-mi30x-20260220"]


def test_newer_release_means_higher_sglang_and_skips_prereleases_unless_pinned_one() -> None:
    tags = (
        "v0.5.5.post2-rocm700-mi30x",
        "v0.5.5.post3-rocm700-mi30x",
        "v0.5.6rc0-rocm700-mi30x",
        "v0.5.4-rocm700-mi30x",
        "v0.5.6-rocm700-mi35x",
        "v0.5.6-rocm700-mi30x-srt",
    )
    basis, found, _ = newer(entry("v0.5.5.post2-rocm700-mi30x"), *tags)
    assert basis == "release"
    assert found == ["v0.5.5.post3-rocm700-mi30x"]
    _, found_rc, _ = newer(entry("v0.5.5rc1-rocm700-mi30x"), *tags)
    assert found_rc == [
        "v0.5.6rc0-rocm700-mi30x",
        "v0.5.5.post3-rocm700-mi30x",
        "v0.5.5.post2-rocm700-mi30x",
    ]


def test_newer_dated_floating_tag_means_later_dated_sibling_not_the_moving_tag() -> None:
    basis, found, _ = newer(
        entry("miles-rocm720-mi35x-20260301"),
        "miles-rocm720-mi35x",
        "miles-rocm720-mi35x-20260302",
        "miles-rocm720-mi35x-202603011200",  # same day, later time
        "miles-rocm720-mi35x-20260228",
        "latest-rocm720-mi35x-20260305",  # other project
        "miles-rocm700-mi35x-20260305",
    )
    assert basis == "dated-sibling"
    assert found == ["miles-rocm720-mi35x-20260302", "miles-rocm720-mi35x-202603011200"]


def test_moving_tag_digest_pin_and_unparsed_tag_have_no_newer() -> None:
    assert newer(entry("miles-rocm720-mi35x"), "miles-rocm720-mi35x-20990101")[:2] == ("moving", [])
    assert newer(entry(None), "v0.5.8-rocm700-mi30x-20990101")[:2] == ("digest", [])
    basis, found, note = newer(entry("my-custom-build"), "my-custom-build-2")
    assert (basis, found) == ("unparsed", []) and "not a known tag family" in note


def test_newer_date_only_means_later_date_same_suffix() -> None:
    basis, found, _ = newer(entry("20250301"), "20250302", "20250302-srt", "20250228", "20250401rc")
    assert basis == "date-only"
    assert found == ["20250302"]


def test_newer_for_constraint_pins_resolves_the_locked_constraints_again() -> None:
    pinned = entry(
        "v0.5.13-rocm720-mi35x-20260601", {"gpu": "mi35x", "rocm": "7.2", "family": "nightly"}
    )
    basis, found, _ = newer(
        pinned,
        "v0.5.13-rocm720-mi35x-20260601",
        "v0.5.13-rocm720-mi35x-20260602",
        "v0.5.14-rocm720-mi35x-20260603-preview",
        "v0.5.13-rocm720-mi30x-20260610",  # fails gpu
        "v0.5.13-rocm700-mi35x-20260610",  # fails rocm
        "v0.5.14-rocm720-mi35x",  # a release: fails family
    )
    assert basis == "constraints"
    assert found == ["v0.5.14-rocm720-mi35x-20260603-preview", "v0.5.13-rocm720-mi35x-20260602"]


def test_constraint_pin_says_so_when_nothing_matches_any_more() -> None:
    pinned = entry("v0.5.13-rocm720-mi35x-20260601", {"gpu": "mi35x", "family": "nightly"})
    basis, found, note = newer(pinned, "v0.5.13-rocm720-mi30x-20260601")
    assert (basis, found) == ("constraints", [])
    assert "no tag matches --gpu mi35x --family nightly any more" in note


@given(
    st.lists(
        st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2099, 12, 31)).map(
            lambda d: d.strftime("%Y%m%d")
        ),
        max_size=20,
        unique=True,  # a registry lists a tag once
    )
)
def test_newer_nightlies_are_exactly_the_later_dates(dates: list[str]) -> None:
    pinned = "v0.5.8-rocm700-mi30x-20260215"
    tags = [f"v0.5.8-rocm700-mi30x-{d}" for d in dates]
    _, found, _ = newer(entry(pinned), *tags)
    assert found == sorted({t for t in tags if t[-8:] > "20260215"}, reverse=True)


# -- targets ---------------------------------------------------------------------------------


def test_targets_are_every_lock_entry_profiles_first() -> None:
    lock = Lock(profiles={"b": entry(), "a": entry()}, references={"r": entry()})
    assert [(t.kind, t.key) for t in targets(lock)] == [
        ("profile", "a"),
        ("profile", "b"),
        ("reference", "r"),
    ]
    assert [t.key for t in targets(lock, ["b", "a", "b"])] == ["b", "a"]


def test_targets_refuse_an_empty_lock_and_unpinned_profiles() -> None:
    with pytest.raises(UsageError, match="nothing to check") as err:
        targets(Lock())
    assert err.value.exit_code == 2
    with pytest.raises(UsageError, match="ci not pinned") as err2:
        targets(Lock(profiles={"a": entry()}), ["ci"])
    assert "rocmenv pin --profile ci" in (err2.value.hint or "")


# -- diffs ---------------------------------------------------------------------------------------


def test_package_diff_names_added_removed_and_direction_of_changes() -> None:
    changes = diff_packages(
        {"amd-aiter": "0.1.9.post1", "sglang": "0.5.8", "torch": "2.9.0", "gone": "1", "odd": "x"},
        {
            "amd_aiter": "0.1.14",
            "sglang": "0.5.6",
            "torch": "2.9.0",
            "megatron-core": "0.15.0",
            "odd": "y",
        },
    )
    got = [(c.name, c.pinned, c.new, c.change) for c in changes]
    assert got == [
        ("amd_aiter", "0.1.9.post1", "0.1.14", "upgraded"),  # PEP 503 names: the same distribution
        ("gone", "1", None, "removed"),
        ("megatron-core", None, "0.15.0", "added"),
        ("odd", "x", "y", "changed"),  # not PEP 440: no direction
        ("sglang", "0.5.8", "0.5.6", "downgraded"),
    ]


@given(
    st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from(["1.0", "1.1", "2.0"])),
    st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from(["1.0", "1.1", "2.0"])),
)
def test_package_diff_applied_to_pinned_gives_new(a: dict[str, str], b: dict[str, str]) -> None:
    result = dict(a)
    for c in diff_packages(a, b):
        if c.new is None:
            del result[c.name]
        else:
            result[c.name] = c.new
    assert result == b
    assert diff_packages(a, a) == ()


def test_shim_verdicts_say_retire_newly_needed_and_unknown() -> None:
    changes = {
        c.name: c
        for c in diff_shims(
            [("aiter-shuffle-scale", True), ("b", False), ("c", True), ("d", None), ("e", False)],
            [("aiter-shuffle-scale", False), ("b", True), ("c", True), ("d", True), ("e", False)],
        )
    }
    retire = changes["aiter-shuffle-scale"]
    assert retire.verdict == "retire"
    assert retire.message == "needed in pinned image, not needed in new one: can be retired"
    assert changes["b"].verdict == "newly-needed" and "newly needed" in changes["b"].message
    assert changes["c"].verdict == "still-needed"
    assert changes["d"].verdict == "unknown" and "unknown in pinned image" in changes["d"].message
    assert changes["e"].verdict == "not-needed"


PROBE_OLD = {
    "probe_version": 1,
    "python": {"version": "3.11.2", "implementation": "cpython", "executable": "/usr/bin/python3"},
    "rocm": {"version": "7.0.0-38", "source": "/opt/rocm/.info/version"},
    "distributions": {"amd-aiter": "0.1.9.post1", "sglang": "0.5.8"},
    "shims": [{"name": "aiter-shuffle-scale", "would_apply": True}],
}
PROBE_NEW = {
    **PROBE_OLD,
    "rocm": {"version": "7.2.0-43", "source": "/opt/rocm/.info/version"},
    "distributions": {"amd-aiter": "0.1.14", "sglang": "0.5.13", "megatron-core": "0.15.0"},
    "shims": [{"name": "aiter-shuffle-scale", "would_apply": False}],
}


def test_compare_two_probes() -> None:
    inspection = compare(
        "moved", facts_from_probe("old@x", PROBE_OLD), facts_from_probe("new@y", PROBE_NEW)
    )
    assert inspection.new_reference == "new@y"
    assert [(c.name, c.change) for c in inspection.packages] == [
        ("amd-aiter", "upgraded"),
        ("megatron-core", "added"),
        ("sglang", "upgraded"),
    ]
    assert [s.verdict for s in inspection.shims] == ["retire"]


def test_probe_cache_probes_each_platform_digest_once_even_concurrently() -> None:
    calls: list[str] = []
    lock = threading.Lock()

    def prober(reference: str) -> dict[str, Any]:
        with lock:
            calls.append(reference)
        time.sleep(0.05)
        return PROBE_OLD

    cache = ProbeCache(prober)
    threads = [
        threading.Thread(target=cache.facts, args=(D2 if i % 2 else D3, f"r{i}")) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 2 and cache.probes == 2
    assert cache.facts(D2, "other@ref").reference == "other@ref"  # cached, under the asked name
    assert cache.probes == 2


# -- verdicts ----------------------------------------------------------------------------------


def result(
    *, moved: bool = False, newer: bool = False, problem: bool = False, inspect_failed: bool = False
) -> ImageDrift:
    r = ImageDrift(
        target=Target(kind="profile", key="ci", entry=entry("v0.5.8-rocm700-mi30x-20260215")),
        tag_state="moved" if moved else "same",
        current_digest=D3 if moved else D1,
        basis="nightly",
        newer_tags=("v0.5.8-rocm700-mi30x-20260301",) if newer else (),
        newest_digest=D3 if newer else None,
    )
    if problem:
        r = replace(r, problem=Problem(type="RegistryUnavailable", message="down"))
    if inspect_failed:
        r = replace(
            r,
            inspection=Inspection(
                against="moved",
                new_reference="x",
                problem=Problem(type="EngineError", message="no engine"),
            ),
        )
    return r


@pytest.mark.parametrize(
    ("fail_on", "moved_code", "newer_code"),
    [("any", 1, 1), ("moved", 1, 0), ("newer", 0, 1), ("never", 0, 0)],
)
def test_exit_code_follows_fail_on(fail_on: Any, moved_code: int, newer_code: int) -> None:
    assert exit_code([result()], fail_on) == 0
    assert exit_code([result(), result(moved=True)], fail_on) == moved_code
    assert exit_code([result(newer=True), result()], fail_on) == newer_code
    assert fails(result(moved=True, newer=True), fail_on) == (fail_on != "never")


@pytest.mark.parametrize("fail_on", ["any", "moved", "newer", "never"])
def test_could_not_check_is_3_whatever_else_happened(fail_on: Any) -> None:
    assert exit_code([result(moved=True), result(problem=True)], fail_on) == 3
    assert exit_code([result(), result(problem=True)], fail_on) == 3
    assert exit_code([result(moved=True, inspect_failed=True)], fail_on) == 4


def test_status_and_accept_command() -> None:
    assert result().status == "ok"
    assert result(moved=True).status == "drift"
    assert result(moved=True, problem=True).status == "error"
    t = Target(kind="reference", key="rocm/sgl-dev:x", entry=entry())
    assert accept_command(t) == "rocmenv pin --update rocm/sgl-dev:x"
    assert (
        accept_command(result().target, "ci.lock")
        == "rocmenv pin --update --lock ci.lock --profile ci"
    )


def test_facts_keep_unknown_verdicts() -> None:
    facts = facts_from_probe("r", {**PROBE_OLD, "shims": [{"name": "s", "would_apply": None}]})
    assert facts == ImageFacts(
        reference="r",
        python="3.11.2",
        rocm="7.0.0-38",
        distributions=(("amd-aiter", "0.1.9.post1"), ("sglang", "0.5.8")),
        shims=(("s", None),),
    )
