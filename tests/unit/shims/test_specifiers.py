"""The launcher's vendored packaging 24.2 answers version questions as the host's packaging.

The launcher must give the same answers as ``packaging.specifiers`` (no PEP 440 parser of
our own): it runs the real packaging, vendored under a private name. These property tests
compare the vendored copy with the host's (newer) packaging on generated versions and
specifiers, and pin down the first shim's range.
"""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import packaging.specifiers as host_specifiers
import packaging.version as host_version
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import rocmenv.launcher._vendor.packaging.specifiers as vendored_specifiers
import rocmenv.launcher._vendor.packaging.version as vendored_version
from rocmenv.launcher import SOURCE_DIR
from rocmenv.shims.catalogue import launcher_specifier_problem

REPO = Path(__file__).resolve().parents[3]


def test_vendored_packaging_is_24_2_and_private():
    import rocmenv.launcher._vendor.packaging as vendored

    assert vendored.__version__ == "24.2"
    assert vendored_specifiers.SpecifierSet is not host_specifiers.SpecifierSet
    # only relative imports inside, so the private name holds
    for path in (SOURCE_DIR / "_vendor" / "packaging").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not (node.module or "").startswith("packaging"), path
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("packaging") for a in node.names), path
    for name in ("LICENSE", "LICENSE.APACHE", "LICENSE.BSD"):
        assert (SOURCE_DIR / "_vendor" / "packaging" / name).is_file()


# ----------------------------------------------------------------- strategies

_small = st.integers(min_value=0, max_value=12)
_pre_tags = st.sampled_from(["a", "b", "rc", "alpha", "beta", "c", "pre", "preview"])
_seps = st.sampled_from(["", ".", "-", "_"])


@st.composite
def versions(draw: st.DrawFn) -> str:
    """PEP 440 versions in normalised and unnormalised spellings, sometimes invalid."""
    parts = [str(draw(_small)) for _ in range(draw(st.integers(1, 4)))]
    text = ".".join(parts)
    if draw(st.booleans()) and draw(st.integers(0, 9)) == 0:
        text = f"{draw(st.integers(1, 2))}!{text}"
    if draw(st.booleans()):
        text += draw(_seps) + draw(_pre_tags) + draw(st.sampled_from(["", *map(str, range(4))]))
    if draw(st.booleans()):
        text += draw(st.sampled_from([".post", "-post", "post", ".rev", "-"])) + str(draw(_small))
    if draw(st.booleans()):
        text += draw(st.sampled_from([".dev", "dev", "-dev"])) + str(draw(st.integers(0, 200)))
    if draw(st.integers(0, 3)) == 0:
        text += "+" + draw(st.sampled_from(["g1a2b3c", "rocm7.2.0.git8449f41", "local.7", "abc"]))
    if draw(st.integers(0, 9)) == 0:
        text = "v" + text
    if draw(st.integers(0, 29)) == 0:
        text = draw(st.sampled_from(["", "1..2", "latest", "1.0+", "1.0-foo-bar"]))
    return text


@st.composite
def specifiers(draw: st.DrawFn) -> str:
    def one() -> str:
        op = draw(st.sampled_from(["==", "!=", "<=", ">=", "<", ">", "~=", "===", "=="]))
        v = draw(versions())
        if draw(st.integers(0, 4)):  # mostly normalised, as rocmenv requires of shims
            with contextlib.suppress(host_version.InvalidVersion):
                v = str(host_version.Version(v))
        if op in ("==", "!=") and draw(st.integers(0, 3)) == 0:
            v = ".".join(str(draw(_small)) for _ in range(draw(st.integers(1, 3)))) + ".*"
        if op == "~=" and "." not in v:
            v += ".0"
        return op + draw(st.sampled_from(["", " "])) + v

    return ",".join(one() for _ in range(draw(st.integers(1, 3))))


def _answer(mod_spec, mod_ver, spec: str, version: str, prereleases):
    try:
        s = mod_spec.SpecifierSet(spec)
    except mod_spec.InvalidSpecifier:
        return "invalid-specifier"
    try:
        v = mod_ver.Version(version)
    except mod_ver.InvalidVersion:
        return "invalid-version"
    return s.contains(v, prereleases=prereleases)


@st.composite
def normalised_versions(draw: st.DrawFn, *, post: bool = True, min_parts: int = 1) -> str:
    """A version in packaging's normal form, built so: release, pre, post, dev, local."""
    text = ".".join(str(draw(_small)) for _ in range(draw(st.integers(min_parts, 4))))
    if draw(st.integers(0, 9)) == 0:
        text = f"{draw(st.integers(1, 2))}!{text}"
    if draw(st.booleans()):
        text += draw(st.sampled_from(["a", "b", "rc"])) + str(draw(_small))
    if post and draw(st.booleans()):
        text += f".post{draw(_small)}"
    if draw(st.booleans()):
        text += f".dev{draw(st.integers(0, 200))}"
    return text


@st.composite
def accepted_specifiers(draw: st.DrawFn) -> str:
    """Specifiers of the shape rocmenv accepts in a shim (normalised versions; no '>', no
    '===', no '<' with a post-release): generated directly rather than filtered, so the
    property test does not discard most of what it draws."""

    def one() -> str:
        op = draw(st.sampled_from(["==", "!=", "<=", ">=", "<", "~="]))
        if op in ("==", "!=") and draw(st.integers(0, 3)) == 0:
            return op + ".".join(str(draw(_small)) for _ in range(draw(st.integers(1, 3)))) + ".*"
        version = draw(normalised_versions(post=op != "<", min_parts=2 if op == "~=" else 1))
        return op + draw(st.sampled_from(["", " "])) + version

    return ",".join(one() for _ in range(draw(st.integers(1, 3))))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=accepted_specifiers(), version=versions(), prereleases=st.booleans())
@example(
    spec=">=0.1.6.post2.dev0,<0.1.14rc0", version="0.1.12.post2.dev150+ga6bb49937", prereleases=True
)
@example(spec="<0.1.14rc0", version="0.1.14.dev3", prereleases=True)
@example(spec="==1.0.*", version="1.0.0+local", prereleases=False)
@example(spec=">=1.0", version="1.0.post1", prereleases=True)
@example(spec="~=2.2.post3", version="2.3", prereleases=False)
def test_vendored_specifiers_answer_like_host_packaging(spec, version, prereleases):
    """For every specifier rocmenv accepts in a shim, both packagings give the same answer.

    rocmenv.shims.parse_shim_file validates SPECIFIER with the host's packaging and
    :func:`launcher_specifier_problem` (normalised versions; no '>', '===', '<' post-release:
    packaging 24.2 and 26 disagree there), so nothing else reaches a container.
    """
    host = _answer(host_specifiers, host_version, spec, version, prereleases)
    assert host != "invalid-specifier", spec  # the generator makes valid ones only
    # the launcher's own probe refuses a rare few more (24.2 and 26 disagree around a bound)
    assume(launcher_specifier_problem(spec) is None)
    vendored = _answer(vendored_specifiers, vendored_version, spec, version, prereleases)
    assert vendored == host, (spec, version, prereleases)


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        # the disagreements between packaging 24.2 and 26 that the rules keep out
        ("~=v1.0", "1.5"),
        ("~=4.2.rev12", "4.11.post12"),
        (">1.1.1.post0", "1.1.1.post1+g1a2b3c"),
        (">8.dev0", "8.post2"),
        ("<7.post0", "7.dev170"),
    ],
)
def test_specifiers_where_packagings_disagree_are_refused(spec, version):
    vendored = vendored_specifiers.SpecifierSet(spec).contains(version, prereleases=True)
    host = host_specifiers.SpecifierSet(spec).contains(version, prereleases=True)
    assert vendored != host
    assert launcher_specifier_problem(spec) is not None


def test_implicit_prereleases_changed_in_packaging_26():
    """Why the runtime passes prereleases=True: packaging 26.0 changed the default.

    With ``prereleases=None`` 24.2 rejects a dev/pre version that no specifier mentions,
    26.x accepts it ("a single version has no alternatives"). Explicit True/False agree.
    """
    spec, version = "<0.1.14", "0.1.12.post2.dev150+ga6bb49937"
    assert vendored_specifiers.SpecifierSet(spec).contains(version) is False
    assert host_specifiers.SpecifierSet(spec).contains(version) is True
    for pre in (True, False):
        assert vendored_specifiers.SpecifierSet(spec).contains(
            version, prereleases=pre
        ) is host_specifiers.SpecifierSet(spec).contains(version, prereleases=pre)


def _host_major() -> int:
    from importlib.metadata import version

    return host_version.Version(version("packaging")).major


def test_the_host_packaging_is_26_or_newer():
    """The comparisons above are against packaging >= 26 (pyproject's dev extra pins it): on
    an older host packaging they would test nothing, so that is a failure, not a skip."""
    assert _host_major() >= 26, "install the dev extra: pip install -e '.[dev]' (packaging>=26)"


@settings(max_examples=500, deadline=None)
@given(a=versions(), b=versions())
def test_vendored_version_ordering_matches_host(a, b):
    try:
        va, vb = vendored_version.Version(a), vendored_version.Version(b)
    except vendored_version.InvalidVersion:
        with pytest.raises(host_version.InvalidVersion):
            host_version.Version(a), host_version.Version(b)
        return
    ha, hb = host_version.Version(a), host_version.Version(b)
    assert (va < vb, va == vb, str(va)) == (ha < hb, ha == hb, str(ha))


# ----------------------------------------------------------------- the first shim's range


def _shim_specifier() -> str:
    tree = ast.parse((REPO / "shims" / "aiter_shuffle_scale.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SPECIFIER":
            return str(ast.literal_eval(node.value))
    raise AssertionError("no SPECIFIER")


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.1.6.post1", False),  # before shuffle_scale_a16w4
        ("0.1.6.post2", True),
        ("0.1.6.post2.dev12+gabc", True),  # main after v0.1.6.post1: the probe decides
        ("0.1.7.post2.dev18", True),  # the PyPI wheel
        ("0.1.7.post5", True),
        ("0.1.9.post1", True),
        ("0.1.12.post1", True),
        ("0.1.12.post2.dev150+ga6bb49937", True),  # sglang v0.5.11's pin
        ("0.1.13rc1", True),
        ("0.1.13rc5", True),
        ("0.1.13.post1", True),
        ("0.1.13.post2.dev3+gdeadbee", True),
        ("0.1.14.dev5", True),  # < 0.1.14rc0 in PEP 440 order
        ("0.1.14rc0", False),
        ("0.1.14rc1.dev48+g32e1e6d7", False),
        ("0.1.14", False),
        ("0.1.17.dev110+g9127c94a1", False),
        ("0.1.22+rocm7.2.0.git8449f41", False),
    ],
)
def test_first_shim_range(version, expected):
    spec = _shim_specifier()
    for mod_spec, mod_ver in (
        (vendored_specifiers, vendored_version),
        (host_specifiers, host_version),
    ):
        assert (
            mod_spec.SpecifierSet(spec).contains(mod_ver.Version(version), prereleases=True)
            is expected
        )


def test_runtime_uses_prereleases_true():
    """A dev build like sglang's aiter pin matches whatever packaging's default is."""
    from rocmenv.launcher import _runtime

    assert _runtime.specifier_contains("<0.1.14", "0.1.12.post2.dev150+ga6bb49937") is True
    assert _runtime.specifier_contains("<0.1.14", "not-a-version") is None
