"""The untrusted policy as data (rocmenv.settings.policy), decision by decision: which words
of ``ROCMENV_UNTRUSTED`` mean what, where the policy file may be, how a table lies over its
base (key by key, and where each value came from), repositories written as their canonical
name. Errors say what and where (the variable, the file, the key) and what to do (a hint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.policy import (
    DEFAULT_POLICY,
    POLICY_ENV,
    Policy,
    load_policy,
    policy_file,
    policy_from_table,
    repository_name,
    untrusted_env,
)


@pytest.mark.parametrize("word", ["1", "true", "yes", "TRUE", " Yes ", "True"])
def test_true_words_turn_untrusted_mode_on(word: str) -> None:
    assert untrusted_env({"ROCMENV_UNTRUSTED": word}) is True


@pytest.mark.parametrize("word", ["0", "false", "no", "FALSE", " No ", "False"])
def test_false_words_leave_untrusted_mode_off(word: str) -> None:
    assert untrusted_env({"ROCMENV_UNTRUSTED": word}) is False


def test_unset_is_trusted() -> None:
    assert untrusted_env({}) is False


@pytest.mark.parametrize("word", ["", "2", "on", "off", "y", "untrusted"])
def test_any_other_word_is_a_usage_error_never_trusted(word: str) -> None:
    with pytest.raises(UsageError) as caught:
        untrusted_env({"ROCMENV_UNTRUSTED": word})
    assert "ROCMENV_UNTRUSTED" in caught.value.what and repr(word) in caught.value.what
    hint = caught.value.hint or ""
    assert all(w in hint for w in ("1", "true", "yes", "0", "false", "no"))  # the choices


def test_a_relative_policy_path_is_refused_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        policy_file({POLICY_ENV: "policy.toml"}, tmp_path)
    assert POLICY_ENV in caught.value.what and "policy.toml" in caught.value.what
    assert caught.value.hint


def test_a_policy_file_inside_the_checkout_is_refused_by_load_policy(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text('cap-add = ["ALL"]\n')
    env = {POLICY_ENV: str(tmp_path / "policy.toml")}
    with pytest.raises(ConfigError) as caught:
        load_policy(env, tmp_path)
    assert str(tmp_path / "policy.toml") in caught.value.what and caught.value.hint
    assert load_policy(env, None).cap_add == ("ALL",)  # no checkout: nothing to be inside


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_policy_variable_is_no_policy_file(tmp_path: Path, value: str) -> None:
    assert policy_file({POLICY_ENV: value}, tmp_path) is None
    assert load_policy({POLICY_ENV: value}, tmp_path) is DEFAULT_POLICY


def test_a_policy_file_lies_over_its_base_key_by_key_and_says_where_it_came_from(
    tmp_path: Path,
) -> None:
    path = tmp_path / "etc" / "policy.toml"
    path.parent.mkdir()
    path.write_text('cap-add = ["SYS_PTRACE"]\nimages = ["rocm/sgl-dev"]\n')
    site = policy_from_table({"network": ["host"]}, "site", source="/etc/rocmenv/config.toml")
    assert site.source == "/etc/rocmenv/config.toml"
    policy = load_policy({POLICY_ENV: str(path)}, tmp_path / "checkout", site)
    assert policy.cap_add == ("SYS_PTRACE",)
    assert policy.network == ("host",)  # the base's, kept
    assert policy.group_add == DEFAULT_POLICY.group_add
    assert policy.images == ("docker.io/rocm/sgl-dev",)  # canonical
    assert policy.source == f"/etc/rocmenv/config.toml + {path}"
    alone = load_policy({POLICY_ENV: str(path)}, None)
    assert alone.source == str(path)


def test_a_table_without_a_source_is_named_by_where_it_is() -> None:
    assert policy_from_table({"devices": ["/dev/x"]}, "[policy] in ~/.config").source == (
        "[policy] in ~/.config"
    )
    over = policy_from_table({"devices": ["/dev/y"]}, "b", Policy(source="a"))
    assert over.source == "a + b"


def test_an_empty_table_is_the_base_itself() -> None:
    base = Policy(source="site", cap_add=("X",))
    assert policy_from_table({}, "empty", base) is base


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ([], "policy file p.toml"),
        ({"cap-ad": ["X"]}, "cap-ad"),
        ({"cap-add": "SYS_PTRACE"}, "cap-add"),
        ({"images": ["a//b"]}, "images"),
    ],
)
def test_a_bad_policy_table_is_an_error_naming_where(table: object, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        policy_from_table(table, "policy file p.toml")
    assert named in caught.value.what
    assert "p.toml" in caught.value.what


@pytest.mark.parametrize(
    ("text", "name"),
    [("rocm/sgl-dev", "docker.io/rocm/sgl-dev"), ("docker.io/rocm/sgl-dev", "docker.io/rocm/sgl-dev"),
     ("ghcr.io/x/y", "ghcr.io/x/y"), ("ubuntu", "docker.io/library/ubuntu")],
)  # fmt: skip
def test_repositories_are_kept_by_their_canonical_name(text: str, name: str) -> None:
    assert repository_name(text, "images") == name


def test_a_bad_repository_is_a_config_error_with_the_references_hint() -> None:
    with pytest.raises(ConfigError) as caught:
        repository_name("a//b", "images in site")
    assert caught.value.what.startswith("images in site: ")
    assert caught.value.hint
