"""The reference grammar, checked against distribution/reference's documented behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmenv.errors import InvalidReference, ReferenceSyntaxError
from rocmenv.grammar.reference import parse, parse_docker_ref, parse_repository, validate_tag

D64 = "a" * 64


@pytest.mark.parametrize(
    ("text", "name", "tag", "digest"),
    [
        ("ubuntu", "docker.io/library/ubuntu", None, None),
        ("ubuntu:22.04", "docker.io/library/ubuntu", "22.04", None),
        ("docker.io/ubuntu", "docker.io/library/ubuntu", None, None),
        ("index.docker.io/ubuntu", "docker.io/library/ubuntu", None, None),
        ("index.docker.io/rocm/sgl-dev", "docker.io/rocm/sgl-dev", None, None),
        (
            "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215",
            "docker.io/rocm/sgl-dev",
            "v0.5.8-rocm700-mi30x-20260215",
            None,
        ),
        ("localhost/foo", "localhost/foo", None, None),
        ("localhost:5000/foo/bar:t", "localhost:5000/foo/bar", "t", None),
        ("127.0.0.1:5000/rocm/sgl-dev:x", "127.0.0.1:5000/rocm/sgl-dev", "x", None),
        ("[::1]:5000/a/b:c", "[::1]:5000/a/b", "c", None),
        ("foo:5000", "docker.io/library/foo", "5000", None),  # a tag, not a port
        ("Example.com/a", "Example.com/a", None, None),  # upper case is fine in the domain
        ("a__b/c-d--e/f.g", "docker.io/a__b/c-d--e/f.g", None, None),
        (f"ubuntu@sha256:{D64}", "docker.io/library/ubuntu", None, f"sha256:{D64}"),
        (f"ubuntu:t@sha256:{D64}", "docker.io/library/ubuntu", "t", f"sha256:{D64}"),
        ("a_b.c/d", "a_b.c/d", None, None),  # not a valid domain: Docker keeps it as a path
    ],
)
def test_parse_normalises_like_docker(
    text: str, name: str, tag: str | None, digest: str | None
) -> None:
    ref = parse(text)
    assert (ref.name, ref.tag, ref.digest) == (name, tag, digest)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "empty"),
        ("UPPER", "uppercase"),
        ("rocm/SGL-dev", "uppercase"),
        (D64, "identifier"),
        ("a/b:$(id)", "tag"),
        ("a/b:" + "x" * 129, "tag"),
        ("a/b:.x", "tag"),
        ("foo;rm -rf", "path-component"),
        ("a b", "path-component"),
        ("a//b", "path-component"),
        ("-a", "path-component"),
        ("a/b_", "path-component"),
        ("a/b___c", "path-component"),
        ("ubuntu\n", "path-component"),
        ("a/" + "b" * 256, "name-too-long"),
        ("a/b@sha256:abc", "digest-length"),
        ("a/b@md5:" + "a" * 32, "digest-algorithm"),
        ("a/b@sha256:" + "A" * 64, "digest-format"),
        ("a/b@sha256", "digest-format"),
        ("exa_mple.com:5000/a", "domain"),
    ],
)
def test_parse_rejects_and_names_the_rule(text: str, rule: str) -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse(text)
    assert info.value.rule == rule
    assert info.value.exit_code == 2


def test_name_length_limit_is_on_the_path_only() -> None:
    ok = "a/" + "b" * 253
    assert len(parse(ok).path) == 255
    with pytest.raises(ReferenceSyntaxError):
        parse("a/" + "b" * 254)


def test_docker_ref_adds_latest_and_drops_tag_of_tag_and_digest() -> None:
    assert str(parse_docker_ref("ubuntu")) == "docker.io/library/ubuntu:latest"
    assert (
        str(parse_docker_ref(f"ubuntu:x@sha256:{D64}")) == f"docker.io/library/ubuntu@sha256:{D64}"
    )


def test_familiar_form_strips_default_domain() -> None:
    assert parse("docker.io/library/ubuntu:1").familiar == "ubuntu:1"
    assert parse("docker.io/library/a/b").familiar == "library/a/b"
    assert parse("rocm/sgl-dev").familiar == "rocm/sgl-dev"
    assert parse("127.0.0.1:5000/rocm/sgl-dev").familiar_name == "127.0.0.1:5000/rocm/sgl-dev"


def test_tag_argument_refuses_full_reference_with_hint() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        validate_tag("rocm/sgl-dev:v0.5.8-rocm700-mi30x")
    assert "not a full image reference" in str(info.value)
    assert "'v0.5.8-rocm700-mi30x'" in (info.value.hint or "")


@pytest.mark.parametrize(
    "bad", ["$(reboot)", "a;b", "a b", "`x`", "a|b", "", "x" * 129, "-x", ".x", "a\nb", "tag\u00e9"]
)
def test_tag_rejects_shell_metacharacters_and_bad_shapes(bad: str) -> None:
    with pytest.raises(InvalidReference):
        validate_tag(bad)


def test_repository_refuses_tag() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse_repository("rocm/sgl-dev:x")
    assert "without :TAG" in str(info.value)


# -- properties -----------------------------------------------------------------------------

alnum = st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True)
sep = st.sampled_from([".", "_", "__", "-", "--"])
component = st.builds(
    lambda a, rest: a + "".join(s + b for s, b in rest),
    alnum,
    st.lists(st.tuples(sep, alnum), max_size=2),
)
path = st.lists(component, min_size=1, max_size=3).map("/".join)
domain = st.one_of(
    st.just("localhost"),
    st.from_regex(r"[a-z0-9]{1,5}(\.[a-z0-9]{1,5}){1,2}", fullmatch=True),
    st.from_regex(r"[a-z]{1,5}(\.[a-z]{1,5})?:[0-9]{1,5}", fullmatch=True),
)
tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
digest = st.from_regex(r"[a-f0-9]{64}", fullmatch=True).map(lambda h: f"sha256:{h}")


@st.composite
def references(draw: st.DrawFn) -> str:
    text = draw(path)
    if draw(st.booleans()):
        text = draw(domain) + "/" + text
    if draw(st.booleans()):
        text += ":" + draw(tag)
    if draw(st.booleans()):
        text += "@" + draw(digest)
    return text


@given(references())
def test_every_grammatical_reference_parses_and_round_trips(text: str) -> None:
    ref = parse(text)
    again = parse(str(ref))
    assert again == ref
    assert parse(ref.familiar) == ref


@given(st.text(max_size=40))
def test_arbitrary_text_either_parses_or_raises_our_error(text: str) -> None:
    try:
        ref = parse(text)
    except ReferenceSyntaxError as err:
        assert err.rule
        return
    # Whatever is accepted is safe to put in a URL path or an argv.
    assert not set(str(ref)) & set(" ;|&$`'\"\\\n\t<>(){}*?!#")


@given(st.text(max_size=30))
def test_tag_validation_accepts_exactly_the_tag_grammar(text: str) -> None:
    import re

    ok = re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", text) is not None
    try:
        validate_tag(text)
    except InvalidReference:
        assert not ok
    else:
        assert ok
