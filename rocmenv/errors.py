"""One error hierarchy; every subclass carries the exit code the CLI returns.

Messages are one paragraph: what failed, where, and what to do. Secrets are redacted
when the CLI prints them (see :mod:`rocmenv.redact`).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, ClassVar, NamedTuple

# Documented exit codes (docs/commands.md "Exit codes"; a test keeps the table in sync).
EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_REGISTRY = 3
EXIT_ENGINE = 4
EXIT_RUN_NOT_STARTED = 125  # `run`/`shell`: rocmenv or the engine failed before the command ran
EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 70  # a bug in rocmenv (EX_SOFTWARE): an exception no input should cause


class RocmenvError(Exception):
    """Base class. ``what`` says what failed, ``hint`` what to do about it."""

    exit_code: ClassVar[int] = EXIT_CHECK_FAILED

    def __init__(self, what: str, *, hint: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint

    def __str__(self) -> str:
        return self.what if not self.hint else f"{self.what}\nhint: {self.hint}"


class CheckFailed(RocmenvError):
    """A check ran and its answer is "no" (validation failed, drift found, no match)."""

    exit_code = EXIT_CHECK_FAILED


class UsageError(RocmenvError):
    """Bad command-line input."""

    exit_code = EXIT_USAGE


class InvalidReference(UsageError):
    """An image reference or tag that breaks the grammar."""


class ConfigError(RocmenvError):
    """A bad rocmenv.toml / [tool.rocmenv] / lockfile."""

    exit_code = EXIT_USAGE


class PolicyViolation(UsageError):
    """Untrusted mode: the container the profile asks for breaks the policy (README
    "Running untrusted code"); names the key, the value and the rule."""


class LockError(ConfigError):
    """The lockfile is corrupt, from the future, or cannot be written."""


class RegistryError(RocmenvError):
    """The registry could not answer (network, auth, 404, bad bytes)."""

    exit_code = EXIT_REGISTRY


class RegistryNotFound(RegistryError):
    pass


class RegistryAuthError(RegistryError):
    pass


class RegistryUnavailable(RegistryError):
    """Unreachable, timed out, or kept failing (5xx/429) after the retries."""


class RegistryProtocolError(RegistryError):
    """The registry answered with something that is not what the API promises."""


class DigestMismatch(RegistryError):
    """Bytes received do not hash to the digest claimed."""


class PullRateLimited(RegistryError):
    """The registry kept answering 429 to the engine's pull, through every retry."""


class EngineError(RocmenvError):
    """The container engine failed or refused."""

    exit_code = EXIT_ENGINE


class DiskBudgetExceeded(EngineError):
    """A pull would leave less free space than the configured reserve."""


class EngineUnavailable(EngineError):
    pass


class EngineProtocolError(EngineError):
    """The engine (or what answers on its socket) sent something that is not HTTP/1.1 as the
    Engine API speaks it: a malformed status line, length or chunk, a short body."""


class ReferenceSyntaxError(InvalidReference):
    """An invalid reference or tag; ``rule`` names the grammar rule it breaks."""

    def __init__(
        self,
        text: str,
        rule: str,
        detail: str,
        *,
        hint: str | None = None,
        kind: str = "image reference",
    ) -> None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        super().__init__(
            f"invalid {kind} {shown!r}: {detail} (rule: {rule})",
            hint=hint
            or "use [REGISTRY[:PORT]/]NAMESPACE/NAME[:TAG][@sha256:DIGEST], lower-case, "
            "e.g. rocm/sgl-dev:v0.5.8-rocm700-mi30x",
        )
        self.text = text
        self.rule = rule
        self.detail = detail


class GpuSelectionError(UsageError):
    """A ``--gpus`` value that is malformed or does not match this host."""


class StepFailed(CheckFailed):
    """A bootstrap step ran and failed (exit code 1); ``details`` go into the report."""

    def __init__(
        self, what: str, *, hint: str | None = None, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(what, hint=hint)
        self.details: dict[str, Any] = dict(details or {})


class ReapFailed(StepFailed):
    """A stale process could not be ended."""


class GpuNotReady(StepFailed):
    """No GPU became ready in time (or no tool to ask is installed)."""


class InvalidGitRef(UsageError):
    """A ref, remote or option value that must not reach git."""


class OverrideFailed(StepFailed):
    """Fetching, checking out, patching or installing an override failed."""


class PatchConflict(OverrideFailed):
    """A patch neither applies nor is already applied."""


if TYPE_CHECKING:

    class StartFailure(NamedTuple):
        message: str
        option: str | None = None  # the option the engine refused, e.g. "--ulimit memlock=-1"
        exit_code: int = 125  # 127: command not found, 126: not executable

else:  # the same named tuple, made without importing typing (rocmenv.typecheck)
    StartFailure = collections.namedtuple(
        "StartFailure", ("message", "option", "exit_code"), defaults=(None, 125)
    )
StartFailure.__doc__ = """What went wrong when a container did not start (from the engine's
error text). A named tuple rather than a dataclass: this module is on every command's start-up
path (``rocmenv --help`` included) and ``dataclasses`` costs ~7 ms to import."""


class EngineStartError(EngineError):
    """The engine created the container but could not start it."""

    def __init__(self, what: str, *, hint: str | None = None, failure: StartFailure) -> None:
        super().__init__(what, hint=hint)
        self.failure = failure


class RunNotStarted(EngineError):
    """rocmenv or the engine failed before the command ran (exit 125, as ``docker run``)."""

    exit_code = EXIT_RUN_NOT_STARTED


class SuiteTestCancelled(RocmenvError):
    """A suite test was stopped before its command started."""

    exit_code = EXIT_INTERRUPTED


class SlurmError(EngineError):
    """Slurm refused or failed, or its allocation does not match the node's GPUs."""
