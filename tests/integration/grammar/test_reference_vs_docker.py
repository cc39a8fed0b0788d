"""Our reference grammar against Docker's own parser (the docker CLI's `docker tag`)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rocmenv.errors import InvalidReference
from rocmenv.grammar.reference import parse

pytestmark = pytest.mark.integration

SOURCE = "rocmenv-test/base:py311"

CORPUS = [
    "ubuntu",
    "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215",
    "localhost/foo",
    "localhost:5000/foo/bar:t",
    "127.0.0.1:5000/rocm/sgl-dev:x",
    "[::1]:5000/a/b:c",
    "foo:5000",
    "Example.com/a",
    "a__b/c-d--e/f.g",
    "a_b.c/d",
    "UPPER",
    "rocm/SGL-dev",
    "a/b:.x",
    "a/b:" + "x" * 128,
    "a/b:" + "x" * 129,
    "foo;rm",
    "a b",
    "a//b",
    "-a",
    "a/b_",
    "a/b___c",
    "a/" + "b" * 253,
    "a/" + "b" * 254,
    "exa_mple.com:5000/a",
    "a.b-c.d:1/x",
    "a-/b",
    "a/b.",
    "xn--bcher-kva.example/x",
    "a:b:c",
    "a/b:c/d",
    "Foo/bar",
]


def docker_accepts(text: str) -> bool:
    proc = subprocess.run(["docker", "tag", SOURCE, text], capture_output=True, text=True)
    if proc.returncode == 0:
        subprocess.run(["docker", "rmi", "--no-prune", text], capture_output=True)
        return True
    assert (
        "reference" in proc.stderr.lower()
        or "invalid" in proc.stderr.lower()
        or "must" in proc.stderr.lower()
    ), proc.stderr
    return False


def ours_accepts(text: str) -> bool:
    try:
        parse(text)
    except InvalidReference:
        return False
    return True


# Where the Docker Engine of this machine (20.10, Debian) is older than the current
# distribution/reference we follow: IPv6 hosts were added later, and the 255-character limit
# now applies to the path only (20.10 counted "docker.io/" too). Current upstream accepts
# both; we assert that, and that 20.10 refuses them, so a change on either side shows up.
# Likewise a first component with upper case ("Foo/bar") is a domain today; 20.10 said
# "repository name must be lowercase".
NEWER_THAN_ENGINE = {"[::1]:5000/a/b:c", "a/" + "b" * 253, "Foo/bar"}


def engine_predates_rule(text: str) -> bool:
    first, slash, _ = text.partition("/")
    return bool(slash) and first.lower() != first and "." not in first and ":" not in first


@pytest.mark.parametrize("text", CORPUS)
def test_validity_agrees_with_docker(family: Any, text: str) -> None:
    if text in NEWER_THAN_ENGINE:
        assert ours_accepts(text) and not docker_accepts(text)
        return
    assert ours_accepts(text) == docker_accepts(text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(r"[a-zA-Z0-9._:/-]{1,30}", fullmatch=True))
def test_validity_agrees_with_docker_on_generated_strings(text: str) -> None:
    assume(not engine_predates_rule(text) and len(text) < 200)
    assert ours_accepts(text) == docker_accepts(text)
