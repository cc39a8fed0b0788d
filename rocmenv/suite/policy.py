"""How a suite test is run: its timeout and its retries.

The keys (in ``[suites.NAME]``, in ``[suites.NAME.per-test."PATH"]`` and in a ``tests = [...]``
entry; the most specific wins)::

    timeout-factor = 1.25      # timeout = max(min-timeout, declared estimate x timeout-factor)
    min-timeout = 300          # seconds: the floor
    timeout = 1800             # seconds: a fixed timeout instead of the two above
    retries = 1                # run a failed or timed-out test again, up to N more times
    retry-wait = 60            # seconds between an attempt's end and the next one's start
    retry-on = "AssertionError: .*(accuracy|throughput)"  # only when the attempt's log matches

The timeout uses the *declared* estimate (the registration's ``est_time``), as the reference
runner does: a learned estimate that grows with a slowing test would hide the slowdown.
``retry-on`` is searched in the last :data:`RETRY_LOG_TAIL` bytes of the failed attempt's log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rocmenv.errors import ConfigError

POLICY_KEYS = ("timeout", "timeout-factor", "min-timeout", "retries", "retry-wait", "retry-on")
DEFAULT_TIMEOUT_FACTOR = 1.25
DEFAULT_MIN_TIMEOUT = 300.0
DEFAULT_RETRY_WAIT = 60.0
MAX_RETRIES = 10
MAX_PATTERN = 1000  # characters of a retry-on expression
RETRY_LOG_TAIL = 1 << 20  # bytes of an attempt's log searched by retry-on
TIMEOUT_EXIT = 124  # the exit code reported for a test killed at its timeout (as timeout(1))


@dataclass(frozen=True, kw_only=True)
class RunPolicy:
    timeout: float | None = None  # fixed seconds; None: from the estimate
    timeout_factor: float = DEFAULT_TIMEOUT_FACTOR
    min_timeout: float = DEFAULT_MIN_TIMEOUT
    retries: int = 0
    retry_wait: float = DEFAULT_RETRY_WAIT
    retry_on: str | None = None  # a regular expression (validated when read)

    def timeout_for(self, declared: float) -> float:
        if self.timeout is not None:
            return self.timeout
        return max(self.min_timeout, declared * self.timeout_factor)

    def should_retry(self, attempt: int, log_tail: str) -> bool:
        """After attempt number ``attempt`` (1-based) failed or timed out."""
        if attempt > self.retries:
            return False
        return self.retry_on is None or re.search(self.retry_on, log_tail) is not None


def _number(value: Any, where: str, *, lo: float, hi: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigError(f"{where} must be a number from {lo:g} to {hi:g}, got {value!r}")
    return float(value)


def parse_policy(table: Mapping[str, Any], where: str, base: RunPolicy) -> RunPolicy:
    """The policy keys of ``table`` over ``base`` (other keys are the caller's)."""
    u: dict[str, Any] = {}
    if "timeout" in table:
        u["timeout"] = _number(table["timeout"], f"{where}.timeout", lo=1, hi=1e7)
    if "timeout-factor" in table:
        u["timeout_factor"] = _number(
            table["timeout-factor"], f"{where}.timeout-factor", lo=1, hi=100
        )
    if "min-timeout" in table:
        u["min_timeout"] = _number(table["min-timeout"], f"{where}.min-timeout", lo=1, hi=1e7)
    if "retries" in table:
        n = table["retries"]
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_RETRIES:
            raise ConfigError(f"{where}.retries must be an integer from 0 to {MAX_RETRIES}")
        u["retries"] = n
    if "retry-wait" in table:
        u["retry_wait"] = _number(table["retry-wait"], f"{where}.retry-wait", lo=0, hi=86400)
    if "retry-on" in table:
        u["retry_on"] = retry_pattern(table["retry-on"], f"{where}.retry-on")
    return replace(base, **u)


def retry_pattern(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_PATTERN:
        raise ConfigError(f"{where} must be a regular expression of 1 to {MAX_PATTERN} characters")
    try:
        re.compile(value)
    except re.error as err:
        raise ConfigError(f"{where} = {value!r} is not a regular expression: {err}") from None
    return value
