"""Host and container answer version questions with one copy of packaging.

The launcher runs the real ``packaging``, vendored under a private name (no PEP 440 parser
of our own); the host answers every PEP 440 question — a shim's SPECIFIER when it reads the
catalogue, ``shims check --image``'s static verdict, tag constraints, drift, diff — with the
same vendored copy, and rocmenv does not depend on an installed ``packaging``. So host and
container decide alike by construction: these tests check the construction (no other
``packaging`` imported anywhere, the bundle carries the very same bytes) and the outcome (the
bundle's runtime on the oldest Pythons answers as the host does), and pin down the first
shim's range.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rocmenv.launcher._vendor.packaging.specifiers as vendored_specifiers
import rocmenv.launcher._vendor.packaging.version as vendored_version
from rocmenv.launcher import PACKAGE, SOURCE_DIR
from rocmenv.launcher._runtime import specifier_contains
from tests.support.launcher import make_bundle
from tests.support.pythons import find_python

REPO = Path(__file__).resolve().parents[3]
VENDOR = SOURCE_DIR / "_vendor" / "packaging"


def _imports(path: Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, node.lineno))
    return out


def test_the_vendored_packaging_is_what_the_vendor_script_fetches_and_stays_private() -> None:
    import rocmenv.launcher._vendor.packaging as vendored

    script = (REPO / "scripts" / "vendor-packaging.sh").read_text()
    wanted = re.search(r'^VERSION="([^"]+)"', script, re.M)
    assert wanted is not None
    assert vendored.__version__ == wanted.group(1)
    assert int(vendored.__version__.split(".")[0]) >= 26
    assert f"packaging {wanted.group(1)}, unmodified" in (VENDOR / "VENDORED.txt").read_text()
    # only relative imports inside, so the private name holds; 3.8 syntax for old containers
    for path in VENDOR.glob("*.py"):
        ast.parse(path.read_text(), feature_version=(3, 8))
        assert not [m for m, _ in _imports(path) if m.split(".")[0] == "packaging"], path
    for name in ("LICENSE", "LICENSE.APACHE", "LICENSE.BSD"):
        assert (VENDOR / name).is_file()


def test_no_rocmenv_module_imports_an_installed_packaging() -> None:
    """Every PEP 440 answer of the host comes from the vendored copy the launcher carries."""
    offenders = []
    for root in (REPO / "rocmenv", REPO / "shims"):
        for path in root.rglob("*.py"):
            if "_vendor" in path.parts:
                continue
            offenders += [
                f"{path.relative_to(REPO)}:{line}"
                for module, line in _imports(path)
                if module.split(".")[0] == "packaging"
            ]
    assert offenders == []


def test_the_bundle_carries_the_hosts_packaging_byte_for_byte(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "cache")
    shipped = bundle.host_dir / PACKAGE / "_vendor" / "packaging"
    ours = {p.name: p.read_bytes() for p in VENDOR.iterdir() if p.is_file()}
    theirs = {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()}
    assert theirs == ours


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
    """Any operator (``>``, ``===`` and ``<`` with a post-release included: no spelling is
    refused any more), versions in any spelling."""

    def one() -> str:
        op = draw(st.sampled_from(["==", "!=", "<=", ">=", "<", ">", "~=", "===", "=="]))
        v = draw(versions())
        if op in ("==", "!=") and draw(st.integers(0, 3)) == 0:
            v = ".".join(str(draw(_small)) for _ in range(draw(st.integers(1, 3)))) + ".*"
        if op == "~=" and "." not in v:
            v += ".0"
        return op + draw(st.sampled_from(["", " "])) + v

    return ",".join(one() for _ in range(draw(st.integers(1, 3))))


def _host_answer(spec: str, version: str) -> bool | str | None:
    try:
        vendored_specifiers.SpecifierSet(spec)
    except vendored_specifiers.InvalidSpecifier:
        return "invalid-specifier"
    return specifier_contains(spec, version)


#: The bundle's runtime asked in another interpreter: ``[[spec, version], …]`` on stdin, the
#: answers (or "invalid-specifier") as JSON on stdout.
_ASK = f"""
import json, sys
from {PACKAGE}._runtime import specifier_contains
from {PACKAGE}._vendor.packaging.specifiers import InvalidSpecifier, SpecifierSet
out = []
for spec, version in json.load(sys.stdin):
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        out.append("invalid-specifier")
        continue
    out.append(specifier_contains(spec, version))
print(json.dumps(out))
"""

_CASES: list[tuple[str, str]] = []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specifiers(), version=versions())
@example(spec=">=0.1.6.post2.dev0,<0.1.14rc0", version="0.1.12.post2.dev150+ga6bb49937")
@example(spec="<0.1.14rc0", version="0.1.14.dev3")
@example(spec="==1.0.*", version="1.0.0+local")
# the spellings packaging 24.2 (the launcher's copy until 0.1.0) answered unlike 26
@example(spec="~=v1.0", version="1.5")
@example(spec="~=4.2.rev12", version="4.11.post12")
@example(spec=">1.1.1.post0", version="1.1.1.post1+g1a2b3c")
@example(spec=">8.dev0", version="8.post2")
@example(spec="<7.post0", version="7.dev170")
def _collect(spec: str, version: str) -> None:
    _CASES.append((spec, version))


@pytest.mark.parametrize("python", ["3.8", "3.9"])
def test_the_bundle_on_the_oldest_pythons_answers_as_the_host(tmp_path: Path, python: str) -> None:
    """The launcher bundle's runtime, run by Python 3.8 (its syntax floor) and 3.9 (the
    oldest Python of the test family's containers), gives the host's answer for every
    generated specifier and version."""
    interpreter = find_python(python)
    if interpreter is None:
        pytest.skip(f"no Python {python} on this machine (PATH or pyenv)")
    if not _CASES:
        _collect()
    bundle = make_bundle(tmp_path / "cache")
    done = subprocess.run(
        [str(interpreter), "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(bundle.host_dir)!r})\n{_ASK}"],
        input=json.dumps(_CASES), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    ours = [_host_answer(spec, version) for spec, version in _CASES]
    assert len(theirs) == len(ours) > 100
    assert [c for c, a, b in zip(_CASES, ours, theirs, strict=True) if a != b] == []
    # and the cases were not all one answer
    assert {True, False, "invalid-specifier"} <= set(ours)


def test_specifiers_once_refused_are_now_accepted_and_decided_alike(tmp_path: Path) -> None:
    """'>', '===' and unnormalised spellings were refused while the launcher had an older
    packaging than the host; now one copy decides, so a shim may use any PEP 440 specifier."""
    from rocmenv.shims.catalogue import parse_shim_file
    from tests.support.launcher import write_shim

    body = "def probe(module):\n    return True, 't'\n\ndef static_probe(find_source):\n"
    body += "    return True, 't'\n\ndef apply(module):\n    pass\n"
    for spec in (">1.1.1.post0", "~=v1.0", "<7.post0", "===1.0"):
        shim = parse_shim_file(write_shim(tmp_path, "s", body, SPECIFIER=spec))
        assert shim.specifier == spec


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
def test_first_shim_range(version: str, expected: bool) -> None:
    spec = _shim_specifier()
    got = vendored_specifiers.SpecifierSet(spec).contains(
        vendored_version.Version(version), prereleases=True
    )
    assert got is expected


def test_runtime_uses_prereleases_true() -> None:
    """A dev build like sglang's aiter pin matches whatever packaging's default is."""
    assert specifier_contains("<0.1.14", "0.1.12.post2.dev150+ga6bb49937") is True
    assert specifier_contains("<0.1.14", "not-a-version") is None
