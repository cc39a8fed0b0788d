"""How bootstrap's steps follow each other: each one reported as a :class:`Step`; a failing
step (a :class:`~rocmenv.errors.RocmenvError`) is recorded and skips every step after it,
except those that always run (the environment report: the report of a failed bootstrap is
the diagnosis)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, TypeVar

from rocmenv.errors import RocmenvError, StepFailed

StepStatus = Literal["ok", "failed", "skipped", "disabled"]
SKIPPED = "skipped: an earlier step failed"


class StepJSON(TypedDict):
    name: str
    status: StepStatus
    summary: str
    duration_s: float
    details: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    status: StepStatus
    summary: str
    duration_s: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> StepJSON:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "duration_s": round(self.duration_s, 3),
            "details": dict(self.details),
        }

    def line(self) -> str:
        from rocmenv.redact import redact

        return redact(f"{self.name:<11} {self.status:<8} {self.summary}")


class Outcome(Protocol):
    """What a step that succeeded reports: its one line and its JSON details."""

    def summary(self) -> str: ...

    def to_json(self) -> Any: ...


OutcomeT = TypeVar("OutcomeT", bound=Outcome)


def off(enabled: bool, reason: str) -> str | None:
    """``reason`` (a disabled step's summary), or None when the step is enabled."""
    return None if enabled else reason


@dataclass(kw_only=True)
class Progress:
    """The steps so far and the first error."""

    clock: Callable[[], float]
    steps: list[Step] = field(default_factory=list)
    error: RocmenvError | None = None

    def run(self, name: str, disabled: str | None, body: Callable[[], OutcomeT]) -> OutcomeT | None:
        """Run one step unless an earlier one failed or it is ``disabled`` (the reason);
        its outcome when it succeeded, else None."""
        start = self.clock()
        if self.error is not None:
            self.steps.append(Step(name=name, status="skipped", summary=SKIPPED))
            return None
        if disabled is not None:
            self.steps.append(Step(name=name, status="disabled", summary=disabled))
            return None
        try:
            outcome = body()
        except RocmenvError as err:
            self.error = err
            self.steps.append(failed_step(name, err, self.clock() - start))
            return None
        self.steps.append(
            Step(
                name=name,
                status="ok",
                summary=outcome.summary(),
                duration_s=self.clock() - start,
                details=outcome.to_json(),
            )
        )
        return outcome

    def always(
        self, name: str, body: Callable[[], tuple[Any, StepStatus, str, dict[str, Any]]]
    ) -> Any:
        """A step that runs whatever happened before and says its own status: ``body``
        returns its data, status, summary and details; the data is returned."""
        start = self.clock()
        data, status, summary, details = body()
        self.steps.append(
            Step(
                name=name,
                status=status,
                summary=summary,
                duration_s=self.clock() - start,
                details=details,
            )
        )
        return data


def failed_step(name: str, err: RocmenvError, duration_s: float) -> Step:
    """The step ``err`` ended: its first line as the summary, a :class:`StepFailed`'s
    details (the commands that ran) as its details."""
    return Step(
        name=name,
        status="failed",
        summary=err.what.splitlines()[0],
        duration_s=duration_s,
        details=dict(err.details) if isinstance(err, StepFailed) else {},
    )
