"""Subprocesses of ``rocmenv bootstrap``: argv lists only, a timeout each, output captured.

Every command bootstrap runs (GPU tools, git, pip, the launcher probe) goes through
:func:`run_command`, so the report can show what ran, how long it took and how it ended.
Standard library only: bootstrap runs inside job containers with the image's Python.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from rocmenv.redact import redact, redact_argv

#: How much of each stream the report keeps (the end: that is where errors are).
TAIL_CHARS = 4000


class CommandJSON(TypedDict):
    argv: list[str]
    cwd: str | None
    returncode: int | None
    timed_out: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    argv: tuple[str, ...]
    cwd: str | None
    returncode: int | None  # None: could not start, or killed at the timeout
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    start_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def output_tail(self, lines: int = 20) -> str:
        """The last lines of stdout and stderr together (for error messages)."""
        text = "\n".join(part for part in (self.stdout.rstrip(), self.stderr.rstrip()) if part)
        if self.start_error:
            text = (text + "\n" if text else "") + self.start_error
        return "\n".join(text.splitlines()[-lines:])

    def describe(self) -> str:
        """``'git fetch …' exited 1`` / ``timed out after 30 s`` / ``could not start: …``."""
        shown = " ".join(redact_argv(self.argv))
        if self.start_error is not None:
            return f"`{shown}` could not start: {self.start_error}"
        if self.timed_out:
            return f"`{shown}` timed out after {self.duration_s:.0f} s"
        return f"`{shown}` exited {self.returncode}"

    def to_json(self) -> CommandJSON:
        return {
            "argv": redact_argv(self.argv),
            "cwd": self.cwd,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            # redacted, then cut: a cut first could start inside a secret and leave its tail
            "stdout_tail": redact(self.stdout)[-TAIL_CHARS:],
            "stderr_tail": redact(self.stderr + (self.start_error or ""))[-TAIL_CHARS:],
        }


Runner = Callable[..., CommandResult]


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin_text: str | None = None,
) -> CommandResult:
    """Run `argv` (never through a shell) and capture its output; never raises for the
    command's own failure (a non-zero exit, a timeout, a missing executable)."""
    argv_t = tuple(str(a) for a in argv)
    start = time.monotonic()
    kwargs: dict[str, Any] = {
        "capture_output": True,
        "timeout": timeout,
        "env": dict(env) if env is not None else None,
        "cwd": cwd,
        "text": True,
        "errors": "replace",
    }
    if stdin_text is not None:
        kwargs["input"] = stdin_text
    else:
        kwargs["stdin"] = subprocess.DEVNULL
    try:
        proc = subprocess.run(list(argv_t), check=False, **kwargs)
    except subprocess.TimeoutExpired as err:
        return CommandResult(
            argv=argv_t,
            cwd=cwd,
            returncode=None,
            stdout=_text(err.stdout),
            stderr=_text(err.stderr),
            duration_s=time.monotonic() - start,
            timed_out=True,
        )
    except OSError as err:
        return CommandResult(
            argv=argv_t,
            cwd=cwd,
            returncode=None,
            stdout="",
            stderr="",
            duration_s=time.monotonic() - start,
            start_error=f"{err.__class__.__name__}: {err.strerror or err}",
        )
    return CommandResult(
        argv=argv_t,
        cwd=cwd,
        returncode=proc.returncode,
        stdout=proc.stdout or "",
        stderr=proc.stderr or "",
        duration_s=time.monotonic() - start,
    )


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data
