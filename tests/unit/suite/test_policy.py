"""Timeouts from the declared estimate and retries on matching failures."""

from __future__ import annotations

import pytest

from rocmenv.errors import ConfigError
from rocmenv.suite.policy import RunPolicy, parse_policy


def test_timeout_is_the_larger_of_the_floor_and_the_estimate_times_the_factor() -> None:
    policy = RunPolicy()
    assert policy.timeout_for(100) == 300  # the floor
    assert policy.timeout_for(800) == 1000  # 800 x 1.25
    assert (
        parse_policy({"timeout-factor": 2, "min-timeout": 10}, "s", policy).timeout_for(100) == 200
    )
    assert parse_policy({"timeout": 42}, "s", policy).timeout_for(10_000) == 42


def test_retries_count_attempts_and_retry_on_must_match_the_log() -> None:
    policy = parse_policy(
        {"retries": 1, "retry-on": r"AssertionError: .*accuracy"}, "s", RunPolicy()
    )
    assert policy.should_retry(1, "E AssertionError: accuracy 0.61 < 0.62")
    assert not policy.should_retry(1, "RuntimeError: HIP out of memory")
    assert not policy.should_retry(2, "AssertionError: accuracy")  # only one retry
    assert RunPolicy(retries=2).should_retry(2, "")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"retries": 11}, "retries must be an integer from 0 to 10"),
        ({"retries": True}, "retries must be an integer"),
        ({"timeout-factor": 0.5}, "timeout-factor must be a number from 1"),
        ({"retry-on": "("}, "not a regular expression"),
        ({"retry-wait": -1}, "retry-wait must be a number from 0"),
        ({"min-timeout": "60"}, "min-timeout must be a number"),
    ],
)
def test_bad_policy_values_are_config_errors(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_policy(table, "[suites.s]", RunPolicy())
