"""The reference grammar, checked against distribution/reference's documented behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmenv.errors import ConfigError, InvalidReference, ReferenceSyntaxError
from rocmenv.grammar.reference import (
    RULE_TEXT,
    check_host,
    host_of,
    host_problem,
    is_loopback_host,
    parse,
    parse_docker_ref,
    parse_repository,
    validate_digest,
    validate_tag,
)

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


# -- what the errors and --json say ---------------------------------------------------------


def test_json_form_names_every_part_and_the_canonical_reference() -> None:
    assert parse("127.0.0.1:5000/rocm/sgl-dev:t").to_json() == {
        "input": None,
        "name": "127.0.0.1:5000/rocm/sgl-dev",
        "domain": "127.0.0.1:5000",
        "path": "rocm/sgl-dev",
        "tag": "t",
        "digest": None,
        "familiar": "127.0.0.1:5000/rocm/sgl-dev:t",
        "canonical": "127.0.0.1:5000/rocm/sgl-dev:t",
    }
    doc = parse(f"ubuntu:22.04@sha256:{D64}").to_json()
    assert (doc["name"], doc["domain"], doc["path"]) == (
        "docker.io/library/ubuntu", "docker.io", "library/ubuntu"
    )  # fmt: skip
    assert (doc["tag"], doc["digest"]) == ("22.04", f"sha256:{D64}")
    assert doc["familiar"] == f"ubuntu:22.04@sha256:{D64}"
    assert doc["canonical"] == f"docker.io/library/ubuntu@sha256:{D64}"
    assert parse("ubuntu").to_json()["canonical"] == "docker.io/library/ubuntu:latest"


@pytest.mark.parametrize(
    ("text", "rule", "part"),
    [
        ("foo;rm -rf", "path-component", "foo;rm -rf"),
        ("library/ok/b_", "path-component", "b_"),  # the bad component, not the first one
        ("a//b", "path-component", "(empty)"),
        ("example.com/a:b/c", "path-component", "a:b"),  # a ':' before the last '/' is no tag
        ("exa_mple.com:5000/a", "domain", "exa_mple.com:5000"),
        ("a/b:$(id)", "tag", "$(id)"),
        ("localhost:5000/a:b$", "tag", "b$"),  # the last ':' starts the tag, not the port's
    ],
)
def test_a_rejection_names_the_part_that_breaks_the_rule(text: str, rule: str, part: str) -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse(text)
    assert (info.value.rule, info.value.detail) == (rule, f"{RULE_TEXT[rule]}: {part!r}")
    assert str(info.value).startswith(f"invalid image reference {text!r}: {RULE_TEXT[rule]}")


def test_with_tag_replaces_the_tag_and_drops_the_digest() -> None:
    ref = parse(f"rocm/sgl-dev:old@sha256:{D64}").with_tag("new")
    assert (ref.name, ref.tag, ref.digest) == ("docker.io/rocm/sgl-dev", "new", None)


# -- registry hosts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "host"),
    [("127.0.0.1:5000", "127.0.0.1"), ("[::1]:5000", "::1"), ("[::1]", "::1"),
     ("registry.lan", "registry.lan"), ("Registry.lan:443", "Registry.lan")],
)  # fmt: skip
def test_host_of_drops_the_port_and_the_brackets(domain: str, host: str) -> None:
    assert host_of(domain) == host


@pytest.mark.parametrize(
    "netloc",
    ["[::1]@evil.example", "[::1]:5000@evil.example", "localhost:5000@evil.example",
     "127.0.0.1:x@evil.example:80", "localhost@evil.example", "127.0.0.1:5000/x"],
)  # fmt: skip
def test_a_netloc_with_user_info_is_not_a_loopback_host(netloc: str) -> None:
    """A token realm ``http://[::1]@evil.example/token`` goes to evil.example: it must not
    pass the "plain HTTP only to loopback" check (it did: ``[::1]`` was taken for the host)."""
    assert is_loopback_host(netloc) is False
    assert host_of(netloc) == netloc


LABEL63 = "a" * 63
NAME253 = ".".join([LABEL63] * 3 + ["b" * 61])


@pytest.mark.parametrize(
    "host",
    [NAME253, NAME253 + ":65535", f"{LABEL63}.lan:1", "[::1]:65535", "[::1]", "127.0.0.1:5000"],
)
def test_registry_hosts_at_their_limits_are_accepted(host: str) -> None:
    assert len(NAME253) == 253
    assert host_problem(host) is None
    assert check_host(host, "[registry] insecure") == host


@pytest.mark.parametrize(
    ("host", "problem"),
    [
        ("", "it is empty"),
        ("user:pw@mirror.lan", "it carries credentials ('@'): mirrors get none; put them in the Docker config"),
        ("https://mirror.lan", "it has a scheme or a path ('/'): give the host and port only"),
        ("a" * 262, "it is longer than 261 characters"),
        ("a" * 261, "the host name is longer than 253 characters"),
        (NAME253 + "c", "the host name is longer than 253 characters"),
        (f"{LABEL63}b.lan", f"the label {LABEL63[:20]!r}... is longer than 63 characters"),
        ("bad_label.lan", "'bad_label' is not a host name label (letters, digits, inner '-')"),
        ("[::1", "'[' without a closing ']'"),
        ("[::1]]:5000", "']:5000' after the address is not :PORT"),
        ("[zz]:5000", "'zz' is not an IPv6 address"),
        ("[::1]:65536", "port '65536' is not a number from 1 to 65535"),
        ("host:065535", "port '065535' is not a number from 1 to 65535"),
        ("host:0", "port '0' is not a number from 1 to 65535"),
        ("host:", "port '' is not a number from 1 to 65535"),
        ("host:\u0661", "port '\u0661' is not a number from 1 to 65535"),
    ],
)  # fmt: skip
def test_registry_hosts_past_their_limits_are_refused_with_the_reason(
    host: str, problem: str
) -> None:
    assert host_problem(host) == problem


def test_a_refused_host_is_named_with_where_it_came_from_and_a_hint() -> None:
    with pytest.raises(ConfigError) as info:
        check_host("mirror.lan/v2", "ROCMENV_MIRRORS")
    assert info.value.what == (
        "ROCMENV_MIRRORS: 'mirror.lan/v2' is not a registry HOST[:PORT]: it has a scheme or a "
        "path ('/'): give the host and port only"
    )
    assert info.value.hint == (
        "write e.g. mirror.example.com, 127.0.0.1:5000 or [::1]:5000 (no scheme, no path)"
    )


def test_a_refused_host_never_shows_what_came_before_its_last_at() -> None:
    with pytest.raises(ConfigError) as info:
        check_host("user:p@ss@mirror.lan", "[registry] insecure")
    assert "'***@mirror.lan' is not a registry HOST[:PORT]" in info.value.what
    assert "p@ss" not in str(info.value) and "ss@" not in str(info.value)


@pytest.mark.parametrize(
    ("length", "shown"), [(80, "x" * 79 + "/"), (81, "x" * 77 + "..."), (300, "x" * 77 + "...")]
)
def test_a_long_refused_host_is_shortened_to_80_characters(length: int, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_host("x" * (length - 1) + "/", "where")
    assert info.value.what.startswith(f"where: {shown!r} is not a registry HOST[:PORT]")


# -- errors of parse, parse_repository, validate_tag, validate_digest ------------------------


def test_an_empty_reference_is_named_empty() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse("")
    assert (info.value.text, info.value.detail) == ("", RULE_TEXT["empty"])
    assert info.value.what == f"invalid image reference '': {RULE_TEXT['empty']} (rule: empty)"


def test_an_image_id_is_refused_with_a_hint_to_use_a_digest() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse(D64)
    assert info.value.detail == RULE_TEXT["identifier"]
    assert info.value.hint == "to name an image by digest use NAME@sha256:<hex>"


def test_a_too_long_path_says_its_length() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse("a/" + "b" * 254)
    assert info.value.detail == f"{RULE_TEXT['name-too-long']} (got 256)"


@pytest.mark.parametrize(
    ("text", "shown"),
    [("rocm/SGL-dev:v1", "rocm/SGL-dev"), ("localhost:5000/Foo:t:u", "localhost:5000/Foo:t"),
     ("rocm/SGL@a@b", "rocm/SGL"), (f"rocm/SGL:t@sha256:{D64}", "rocm/SGL"),
     ("UPPER", "library/UPPER")],
)  # fmt: skip
def test_upper_case_is_refused_naming_the_repository_as_written(text: str, shown: str) -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse(text)
    assert (info.value.rule, info.value.detail) == (
        "uppercase", f"{RULE_TEXT['uppercase']}: {shown!r}"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("digest", "rule", "detail"),
    [
        ("sha256:abc", "digest-length", "sha256 needs 64 hex digits, got 3"),
        ("sha256:abc:de", "digest-length", "sha256 needs 64 hex digits, got 6"),
        ("sha256:", "digest-format", f"{RULE_TEXT['digest-format']}: 'sha256:'"),
        ("sha256", "digest-format", f"{RULE_TEXT['digest-format']}: 'sha256'"),
        (":" + "a" * 64, "digest-format", f"{RULE_TEXT['digest-format']}: {':' + 'a' * 64!r}"),
        ("md5:" + "a" * 32, "digest-algorithm", f"{RULE_TEXT['digest-algorithm']}: 'md5'"),
        ("sha256:" + "A" * 64, "digest-format", f"{RULE_TEXT['digest-format']}: {'sha256:' + 'A' * 64!r}"),
        ("1x:" + "a" * 64, "digest-format", f"{RULE_TEXT['digest-format']}: {'1x:' + 'a' * 64!r}"),
    ],
)  # fmt: skip
def test_a_bad_digest_names_what_is_wrong_with_it(digest: str, rule: str, detail: str) -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        validate_digest(digest)
    assert (info.value.rule, info.value.detail, info.value.text) == (rule, detail, digest)
    with pytest.raises(ReferenceSyntaxError) as in_ref:
        parse(f"a/b@{digest}")
    assert (in_ref.value.rule, in_ref.value.detail) == (rule, detail)


def test_a_good_digest_is_returned_as_it_is() -> None:
    assert validate_digest(f"sha512:{'0' * 128}") == f"sha512:{'0' * 128}"


def test_a_repository_with_a_tag_is_refused_with_the_repository_to_pass() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse_repository("docker.io/rocm/sgl-dev:x")
    assert info.value.rule == "format"
    assert info.value.detail == "a repository is expected here, without :TAG or @DIGEST"
    assert info.value.hint == "pass 'rocm/sgl-dev' and give the tag separately"


@pytest.mark.parametrize(
    ("text", "example", "repository"),
    [("rocm/sgl-dev:v1", "v1", "rocm/sgl-dev"), ("ubuntu:22.04", "22.04", "ubuntu"),
     ("rocm/sgl-dev", "latest", "rocm/sgl-dev"), (f"a@sha256:{D64}", "latest", "a")],
)  # fmt: skip
def test_a_reference_where_a_tag_is_expected_gets_the_tag_to_pass(
    text: str, example: str, repository: str
) -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        validate_tag(text)
    assert info.value.rule == "tag"
    assert info.value.what == (
        f"invalid tag {text!r}: a tag is expected here, not a full image reference (rule: tag)"
    )
    assert info.value.hint == (
        f"pass the tag alone, e.g. {example!r}, and the repository {repository!r} separately"
    )


@pytest.mark.parametrize(
    ("tag", "detail"),
    [
        ("", "tag is empty"),
        ("x" * 129, "tag is 129 characters long; at most 128 are allowed"),
        ("-x", "tag must start with a letter, digit or '_': '-x'"),
        ("\u00e9x", "tag must start with a letter, digit or '_': '\u00e9x'"),
        ("a;b$ a;", "tag contains characters that are not allowed: ' $;'"),
        ("a\u00e9", "tag contains characters that are not allowed: '\u00e9'"),
        ("a@b", "tag contains characters that are not allowed: '@'"),
    ],
)
def test_a_bad_tag_says_what_is_wrong_with_it(tag: str, detail: str) -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        validate_tag(tag)
    assert (
        info.value.what
        == f"invalid tag {tag[:77] + '...' if len(tag) > 80 else tag!r}: {detail} (rule: tag)"
    )
    assert info.value.hint == "tags match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"


def test_a_tag_of_128_characters_is_allowed() -> None:
    assert validate_tag("x" * 128) == "x" * 128


@pytest.mark.parametrize(
    ("domain", "loopback"),
    [("localhost", True), ("LocalHost:5000", True), ("127.0.0.1:5000", True),
     ("127.9.9.9", True), ("[::1]:5001", True), ("::1", True), ("localhost.example", False),
     ("127.attacker.example", False), ("10.0.0.1", False), ("[::2]", False)],
)  # fmt: skip
def test_localhost_and_loopback_addresses_are_loopback_hosts(domain: str, loopback: bool) -> None:
    assert is_loopback_host(domain) is loopback


def test_a_digest_pins_the_reference_and_keeps_its_tag() -> None:
    digest = "sha256:" + "a" * 64
    ref = parse("rocm/sgl-dev:v0.5.8").with_digest(digest)
    assert (ref.domain, ref.path, ref.tag, ref.digest) == (
        "docker.io", "rocm/sgl-dev", "v0.5.8", digest
    )  # fmt: skip
    with pytest.raises(InvalidReference):
        ref.with_digest("md5:" + "a" * 32)


def test_a_tag_of_128_characters_with_a_bad_start_is_told_about_its_start() -> None:
    with pytest.raises(ReferenceSyntaxError) as err:
        validate_tag("." + "a" * 127)
    assert "tag must start with a letter, digit or '_'" in str(err.value)
