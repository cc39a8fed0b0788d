"""Bootstrap step 1: wait until the GPUs answer, with a bounded backoff.

The first tool of the configured order that is on ``PATH`` is used (default ``rocm-smi``,
then ``amd-smi``, then ``rocminfo``). An attempt succeeds when the tool exits 0 AND its output
shows at least ``expect`` GPUs (at least 1 by default). What is parsed:

* ``rocm-smi`` (no arguments, the concise table): rows of the table that follows the
  ``Device  Node  IDs …`` header and start with a device index and a node number
  (``0       2     0x74a1, …``); also ``GPU[N]`` prefixes of the other rocm-smi views. The
  distinct device indices are counted.
* ``amd-smi list``: lines ``GPU: N``.
* ``rocminfo``: agent blocks (``Agent N``) whose ``Device Type:`` is ``GPU``; their first
  ``Name:`` is the gfx target (``gfx942``), reported as well.

Attempts are retried after 1, 2, 4, 8, 8 … seconds (``backoff_cap``) until ``timeout``
seconds have passed since the first attempt; no attempt starts after the deadline, and each
attempt's own timeout is cut to what is left. On failure the last attempt's output is in
the error message.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocmenv.bootstrap.commands import CommandResult, run_command
from rocmenv.errors import GpuNotReady

DEFAULT_TOOLS = ("rocm-smi", "amd-smi", "rocminfo")
TOOL_ARGV: dict[str, tuple[str, ...]] = {
    "rocm-smi": (),
    "amd-smi": ("list",),
    "rocminfo": (),
}

_SMI_HEADER = re.compile(r"^\s*Device\s+Node\b")
_SMI_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S")
_SMI_GPU_PREFIX = re.compile(r"^\s*GPU\[(\d+)\]")
_AMDSMI_GPU = re.compile(r"^\s*GPU:\s*(\d+)\s*$")
_ROCMINFO_AGENT = re.compile(r"^\s*Agent\s+\d+\s*$")
_ROCMINFO_FIELD = re.compile(r"^\s*(Name|Device Type):\s*(.*?)\s*$")
_GFX = re.compile(r"^gfx[0-9a-f]+$")


@dataclass(frozen=True, kw_only=True)
class GpuCount:
    gpus: int
    gfx_targets: tuple[str, ...] = ()


def parse_rocm_smi(text: str) -> GpuCount:
    indices: set[int] = set()
    in_table = False
    for line in text.splitlines():
        if _SMI_HEADER.match(line):
            in_table = True
            continue
        prefixed = _SMI_GPU_PREFIX.match(line)
        if prefixed:
            indices.add(int(prefixed.group(1)))
            continue
        if in_table:
            row = _SMI_ROW.match(line)
            if row:
                indices.add(int(row.group(1)))
    return GpuCount(gpus=len(indices))


def parse_amd_smi(text: str) -> GpuCount:
    indices = {int(m.group(1)) for m in map(_AMDSMI_GPU.match, text.splitlines()) if m}
    return GpuCount(gpus=len(indices))


def parse_rocminfo(text: str) -> GpuCount:
    agents: list[dict[str, str]] = []
    for line in text.splitlines():
        if _ROCMINFO_AGENT.match(line):
            agents.append({})
            continue
        if not agents:
            continue
        found = _ROCMINFO_FIELD.match(line)
        if found and found.group(1) not in agents[-1]:
            agents[-1][found.group(1)] = found.group(2)
    gpus = [a for a in agents if a.get("Device Type", "").upper() == "GPU"]
    gfx = sorted({a["Name"] for a in gpus if _GFX.match(a.get("Name", ""))})
    return GpuCount(gpus=len(gpus), gfx_targets=tuple(gfx))


PARSERS: dict[str, Callable[[str], GpuCount]] = {
    "rocm-smi": parse_rocm_smi,
    "amd-smi": parse_amd_smi,
    "rocminfo": parse_rocminfo,
}


@dataclass(frozen=True, kw_only=True)
class Attempt:
    number: int
    at_s: float  # seconds since the first attempt started
    returncode: int | None
    gpus: int
    ready: bool
    timed_out: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.number,
            "at_s": round(self.at_s, 3),
            "returncode": self.returncode,
            "gpus": self.gpus,
            "ready": self.ready,
            "timed_out": self.timed_out,
        }


@dataclass(frozen=True, kw_only=True)
class GpuWaitResult:
    tool: str
    path: str
    argv: tuple[str, ...]
    gpus: int
    gfx_targets: tuple[str, ...]
    attempts: tuple[Attempt, ...]
    waited_s: float
    last_output: str = ""

    def summary(self) -> str:
        tries = len(self.attempts)
        after = f" after {tries} attempts ({self.waited_s:.1f} s)" if tries > 1 else ""
        gfx = f" ({', '.join(self.gfx_targets)})" if self.gfx_targets else ""
        return f"{self.tool}: {self.gpus} GPU{'s' if self.gpus != 1 else ''}{gfx}{after}"

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "path": self.path,
            "argv": list(self.argv),
            "gpus": self.gpus,
            "gfx_targets": list(self.gfx_targets),
            "attempts": [a.to_json() for a in self.attempts],
            "waited_s": round(self.waited_s, 3),
        }


@dataclass(frozen=True, kw_only=True)
class GpuWaitOptions:
    timeout: float = 120.0
    tools: tuple[str, ...] = DEFAULT_TOOLS
    expect: int = 1
    backoff_start: float = 1.0
    backoff_cap: float = 8.0
    attempt_timeout: float = 30.0


@dataclass(frozen=True, kw_only=True)
class GpuWaitDeps:
    """What the wait loop touches, replaceable in tests."""

    run: Callable[..., CommandResult] = run_command
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    which: Callable[[str, str | None], str | None] = field(
        default=lambda name, path: shutil.which(name, path=path)
    )


def find_tool(tools: Sequence[str], env: Mapping[str, str], deps: GpuWaitDeps) -> tuple[str, str]:
    for tool in tools:
        path = deps.which(tool, env.get("PATH"))
        if path:
            return tool, path
    raise GpuNotReady(
        f"none of {', '.join(tools)} is on PATH ({env.get('PATH', '')}): cannot tell whether "
        "the GPUs are ready",
        hint="install the ROCm tools in the image, set --gpu-tools, or skip with --no-gpu-wait",
    )


def wait_for_gpus(
    options: GpuWaitOptions, env: Mapping[str, str], deps: GpuWaitDeps | None = None
) -> GpuWaitResult:
    """Poll the first available tool until it shows ``options.expect`` GPUs (or time runs out)."""
    deps = deps or GpuWaitDeps()
    unknown = [t for t in options.tools if t not in PARSERS]
    if unknown:
        raise GpuNotReady(
            f"unknown GPU tool(s) {', '.join(unknown)}",
            hint=f"--gpu-tools takes a comma-separated subset of {', '.join(DEFAULT_TOOLS)}",
        )
    tool, path = find_tool(options.tools, env, deps)
    argv = (path, *TOOL_ARGV[tool])
    parse = PARSERS[tool]
    start = deps.clock()
    deadline = start + options.timeout
    delay = options.backoff_start
    attempts: list[Attempt] = []
    last: CommandResult | None = None
    while True:
        now = deps.clock()
        budget = max(1.0, min(options.attempt_timeout, deadline - now))
        last = deps.run(argv, timeout=budget, env=env)
        count = parse(last.stdout) if last.ok else GpuCount(gpus=0)
        ready = last.ok and count.gpus >= max(1, options.expect)
        attempts.append(
            Attempt(
                number=len(attempts) + 1,
                at_s=now - start,
                returncode=last.returncode,
                gpus=count.gpus,
                ready=ready,
                timed_out=last.timed_out,
            )
        )
        if ready:
            return GpuWaitResult(
                tool=tool,
                path=path,
                argv=argv,
                gpus=count.gpus,
                gfx_targets=count.gfx_targets,
                attempts=tuple(attempts),
                waited_s=deps.clock() - start,
                last_output=last.stdout,
            )
        remaining = deadline - deps.clock()
        if remaining <= 0:
            break
        deps.sleep(min(delay, remaining))
        delay = min(delay * 2, options.backoff_cap)
    waited = deps.clock() - start
    why = _why_not_ready(last, parse, options.expect)
    details = {
        "tool": tool,
        "path": path,
        "argv": list(argv),
        "attempts": [a.to_json() for a in attempts],
        "waited_s": round(waited, 3),
        "last_output": last.output_tail(60) if last is not None else "",
    }
    tail = last.output_tail(30) if last is not None else ""
    raise GpuNotReady(
        f"the GPUs were not ready after {len(attempts)} attempts over {waited:.0f} s "
        f"(--gpu-timeout {options.timeout:g}): {why}\n"
        f"last output of {' '.join(argv)}:\n{tail or '(no output)'}",
        hint="check the runner's amdgpu driver and the container's --device=/dev/kfd "
        "--device=/dev/dri options; raise --gpu-timeout if the GPUs are slow to come up",
        details=details,
    )


def _why_not_ready(
    last: CommandResult | None, parse: Callable[[str], GpuCount], expect: int
) -> str:
    if last is None:
        return "no attempt ran"
    if not last.ok:
        return last.describe()
    found = parse(last.stdout).gpus
    return f"it exited 0 but showed {found} GPU{'s' if found != 1 else ''} (need {max(1, expect)})"
