"""The invocation context: environment, working directory and streams, passed explicitly.

Nothing in rocmenv reads ``os.environ`` or the current directory at import time; commands
receive a :class:`Context` made once by the CLI (tests make their own).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO


@dataclass(frozen=True, kw_only=True)
class Context:
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: Path = field(default_factory=Path.cwd)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    debug: bool = False
    config_path: Path | None = None

    @property
    def in_github_actions(self) -> bool:
        return self.env.get("GITHUB_ACTIONS") == "true"

    @property
    def stderr_is_tty(self) -> bool:
        try:
            return self.stderr.isatty()
        except (AttributeError, ValueError):
            return False

    def flag(self, name: str) -> bool:
        """An environment switch: ``1``/``true``/``yes``/``on`` (any case) is true."""
        return self.env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}
