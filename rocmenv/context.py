"""The invocation context: environment, working directory and streams, passed explicitly.

Nothing in rocmenv reads ``os.environ`` or the current directory at import time; commands
receive a :class:`Context` made once by the CLI (tests make their own).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from rocmenv.record import field, record

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import TextIO

    from rocmenv.joblog import ChildOutput, JobLog


@record
class Context:
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: Path = field(default_factory=Path.cwd)
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    debug: bool = False
    config_path: Path | None = None

    @property
    def in_github_actions(self) -> bool:
        return in_github_actions(self.env)

    @property
    def checkout(self) -> Path:
        """The git top level of the working directory (else the directory itself): the tree
        that is the pull request's, where host writes follow no links (:mod:`rocmenv.hostfs`)."""
        return find_checkout(self.cwd)

    @property
    def stdin_is_tty(self) -> bool:
        return _isatty(self.stdin)

    @property
    def stdout_is_tty(self) -> bool:
        return _isatty(self.stdout)

    @property
    def stderr_is_tty(self) -> bool:
        return _isatty(self.stderr)

    @property
    def joblog(self) -> JobLog:
        """The one writer of workflow commands and untrusted output on this context's stderr
        (:mod:`rocmenv.joblog`)."""
        from rocmenv.joblog import joblog

        return joblog(self.stderr)

    def child_output(self, *, untrusted: bool) -> AbstractContextManager[ChildOutput]:
        """The file descriptors a child (a container, ``srun``) writes its output to: this
        context's own, except for an untrusted child inside GitHub Actions, whose output is
        fenced in the job log (:meth:`rocmenv.joblog.JobLog.child_output`)."""
        from rocmenv.joblog import child_output

        return child_output(self.stdout, self.stderr, fence=untrusted and self.in_github_actions)

    def flag(self, name: str) -> bool:
        """An environment switch: ``1``/``true``/``yes``/``on`` (any case) is true."""
        return env_flag(self.env, name)


def in_github_actions(env: Mapping[str, str]) -> bool:
    """Whether this runs as a GitHub Actions step (the runner sets ``GITHUB_ACTIONS=true``)."""
    return env.get("GITHUB_ACTIONS") == "true"


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """An environment switch: ``1``/``true``/``yes``/``on`` (any case) is true."""
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def find_checkout(cwd: Path) -> Path:
    """The git top level containing ``cwd`` (a ``.git`` directory or file), else ``cwd``."""
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return directory
    return cwd


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
