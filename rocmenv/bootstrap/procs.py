"""Bootstrap step 2: end stale Ray/SGLang processes left behind by earlier jobs.

A process is stale when one of these rules matches what ``/proc/<pid>/cmdline`` (argv)
and ``/proc/<pid>/comm`` say — never a substring of "ray" anywhere in the arguments:

==================  ==========================================================================
rule                matches
==================  ==========================================================================
``ray-daemon``      ``comm`` or ``basename(argv[0])`` is ``raylet``, ``gcs_server`` or
                    ``plasma_store``
``ray-title``       ``argv[0]`` or ``comm`` starts with ``ray::`` (Ray worker titles:
                    ``ray::IDLE``, ``ray::MyActor.method``)
``sglang-title``    ``argv[0]`` or ``comm`` starts with ``sglang::`` (``sglang::scheduler``,
                    ``sglang::detokenizer`` …)
``python-module``   a Python interpreter run with ``-m`` ``ray`` / ``ray.…``,
                    ``sglang.launch_server``, ``sglang_router.launch_server`` or
                    ``sglang_router.launch_router``
``python-script``   a Python interpreter whose script is one of Ray's daemons inside a ``ray``
                    package directory (``ray/dashboard/dashboard.py``, ``ray/dashboard/agent.py``,
                    ``ray/_private/log_monitor.py``, ``ray/_private/monitor.py``,
                    ``ray/autoscaler/_private/monitor.py``, ``ray/_private/ray_process_reaper.py``,
                    ``ray/_private/workers/default_worker.py``,
                    ``ray/_private/runtime_env/agent/main.py``), ``…/sglang/launch_server.py``,
                    the ``ray`` console script with ``start``, or the ``sglang`` console script
                    with ``serve``
==================  ==========================================================================

Never touched: PID 1, the current process and its ancestors, kernel threads (empty
cmdline). Each victim is identified by (pid, start time); it is signalled through a pidfd
when the kernel has them (so a recycled pid is never hit) and re-checked before each signal.
SIGTERM first, then SIGKILL for whatever is still alive after ``grace`` seconds. Zombies
count as ended.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocmenv.errors import ReapFailed

RAY_DAEMONS = frozenset({"raylet", "gcs_server", "plasma_store"})
PYTHON_MODULES = frozenset(
    {"sglang.launch_server", "sglang_router.launch_server", "sglang_router.launch_router"}
)
_RAY_SCRIPT = re.compile(
    r"(?:^|/)ray/(?:dashboard/(?:dashboard|agent)\.py"
    r"|_private/(?:log_monitor|monitor|ray_process_reaper|workers/default_worker"
    r"|runtime_env/agent/main)\.py"
    r"|autoscaler/_private/monitor\.py)$"
)
_SGLANG_SCRIPT = re.compile(r"(?:^|/)sglang/launch_server\.py$")
_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*)?$")
# Python options that take a value as the next argument (or attached: -Wignore).
_PY_OPTS_WITH_VALUE = frozenset("WX")
_PY_LONG_WITH_VALUE = frozenset({"--check-hash-based-pycs"})


@dataclass(frozen=True, kw_only=True)
class ProcInfo:
    pid: int
    ppid: int
    comm: str
    argv: tuple[str, ...]
    start_time: int  # field 22 of /proc/<pid>/stat (clock ticks since boot)
    state: str  # field 3: R S D Z T …

    @property
    def name(self) -> str:
        """What a person would call it: the title/argv[0] basename, else comm."""
        if self.argv:
            first = self.argv[0]
            if "::" in first:
                return first.strip()
            return os.path.basename(first) or self.comm
        return self.comm


def _python_target(argv: Sequence[str]) -> tuple[str, str] | None:
    """For a Python command line: ("module", name) for -m, ("script", path) for a script."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in _PY_LONG_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            # a cluster of one-letter flags; -c/-m end option parsing, -W/-X take a value
            for j, letter in enumerate(arg[1:], start=1):
                rest = arg[j + 1 :]
                if letter == "c":
                    return None
                if letter == "m":
                    module = rest or (argv[i + 1] if i + 1 < len(argv) else "")
                    return ("module", module)
                if letter in _PY_OPTS_WITH_VALUE:
                    i += 0 if rest else 1
                    break
            i += 1
            continue
        break
    if i < len(argv) and argv[i] != "-":
        return ("script", argv[i])
    return None


def match_stale(proc: ProcInfo) -> str | None:
    """The rule that makes `proc` a stale Ray/SGLang process, or ``None``."""
    argv0 = proc.argv[0] if proc.argv else ""
    base0 = os.path.basename(argv0)
    if proc.comm in RAY_DAEMONS or base0 in RAY_DAEMONS:
        return "ray-daemon"
    if argv0.startswith("ray::") or proc.comm.startswith("ray::"):
        return "ray-title"
    if argv0.startswith("sglang::") or proc.comm.startswith("sglang::"):
        return "sglang-title"
    if not _PYTHON.match(base0):
        return None
    target = _python_target(proc.argv)
    if target is None:
        return None
    kind, value = target
    if kind == "module":
        if value == "ray" or value.startswith("ray.") or value in PYTHON_MODULES:
            return "python-module"
        return None
    rest = proc.argv[proc.argv.index(value) + 1 :] if value in proc.argv else ()
    if _RAY_SCRIPT.search(value) or _SGLANG_SCRIPT.search(value):
        return "python-script"
    base = os.path.basename(value)
    if base == "ray" and rest[:1] == ("start",):
        return "python-script"
    if base == "sglang" and rest[:1] == ("serve",):
        return "python-script"
    return None


# ------------------------------------------------------------------ reading /proc


def read_proc(proc_root: Path, pid: int) -> ProcInfo | None:
    """One process from `proc_root`, or ``None`` if it is gone or unreadable."""
    base = proc_root / str(pid)
    try:
        raw = (base / "cmdline").read_bytes()
        comm = (base / "comm").read_text(encoding="utf-8", errors="replace").rstrip("\n")
        stat = (base / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # comm in stat is in parentheses and may contain spaces and ')': split after the last ')'
    close = stat.rfind(")")
    fields = stat[close + 2 :].split() if close >= 0 else []
    if len(fields) < 20:
        return None
    state, ppid, start_time = fields[0], int(fields[1]), int(fields[19])
    argv = tuple(a.decode("utf-8", "replace") for a in raw.split(b"\0"))
    while argv and argv[-1] == "":
        argv = argv[:-1]
    if len(argv) == 1:  # a setproctitle() title, padded with spaces: "ray::IDLE   "
        argv = (argv[0].rstrip(),)
    return ProcInfo(pid=pid, ppid=ppid, comm=comm, argv=argv, start_time=start_time, state=state)


def list_pids(proc_root: Path) -> list[int]:
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def protected_pids(proc_root: Path, self_pid: int) -> set[int]:
    """PID 1, `self_pid` and its ancestors (as `proc_root` shows them)."""
    keep = {1, self_pid}
    pid = self_pid
    for _ in range(4096):
        info = read_proc(proc_root, pid)
        if info is None or info.ppid <= 0 or info.ppid in keep:
            if info is not None:
                keep.add(info.ppid)
            break
        keep.add(info.ppid)
        pid = info.ppid
    keep.discard(0)
    return keep


@dataclass(frozen=True, kw_only=True)
class Candidate:
    proc: ProcInfo
    rule: str


def find_stale(proc_root: Path, self_pid: int) -> tuple[list[Candidate], int]:
    """The stale processes under `proc_root` and how many processes were looked at."""
    keep = protected_pids(proc_root, self_pid)
    found: list[Candidate] = []
    scanned = 0
    for pid in list_pids(proc_root):
        info = read_proc(proc_root, pid)
        if info is None:
            continue
        scanned += 1
        if pid in keep or not info.argv:
            continue
        rule = match_stale(info)
        if rule is not None:
            found.append(Candidate(proc=info, rule=rule))
    return found, scanned


# ------------------------------------------------------------------ signalling


class Signaller(Protocol):
    def send(self, proc: ProcInfo, sig: int) -> bool:
        """Send `sig` to `proc` if it is still that process; False if it is gone."""
        ...

    def alive(self, proc: ProcInfo) -> bool: ...

    def close(self) -> None: ...


@dataclass
class ProcSignaller:
    """Signals real processes: through pidfds when available, else ``os.kill`` after
    re-reading the start time."""

    proc_root: Path = Path("/proc")
    _fds: dict[int, int] = field(default_factory=dict)

    def _same(self, proc: ProcInfo) -> bool:
        now = read_proc(self.proc_root, proc.pid)
        return now is not None and now.start_time == proc.start_time and now.state != "Z"

    def _pidfd(self, proc: ProcInfo) -> int | None:
        if proc.pid in self._fds:
            return self._fds[proc.pid]
        opener = getattr(os, "pidfd_open", None)
        if opener is None:
            return None
        try:
            fd = int(opener(proc.pid))
        except OSError:
            return None
        if not self._same(proc):  # opened a recycled pid: forget it
            os.close(fd)
            return None
        self._fds[proc.pid] = fd
        return fd

    def send(self, proc: ProcInfo, sig: int) -> bool:
        if not self._same(proc):
            return False
        fd = self._pidfd(proc)
        sender = getattr(signal, "pidfd_send_signal", None)
        try:
            if fd is not None and sender is not None:
                sender(fd, sig)
            else:
                os.kill(proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def alive(self, proc: ProcInfo) -> bool:
        return self._same(proc)

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


@dataclass(frozen=True, kw_only=True)
class Ended:
    pid: int
    name: str
    comm: str
    argv: tuple[str, ...]
    rule: str
    signal: str | None  # the signal that ended it (None: it was gone before we signalled)
    ended: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        from rocmenv.redact import redact

        return {
            "pid": self.pid,
            "name": self.name,
            "comm": self.comm,
            "argv": [redact(a) for a in self.argv[:20]],
            "rule": self.rule,
            "signal": self.signal,
            "ended": self.ended,
            "error": self.error,
        }


@dataclass(frozen=True, kw_only=True)
class ReapResult:
    scanned: int
    ended: tuple[Ended, ...]
    grace_s: float

    def summary(self) -> str:
        if not self.ended:
            return f"no stale Ray/SGLang processes ({self.scanned} processes looked at)"
        parts = [f"{e.name} (pid {e.pid}, {e.signal or 'gone'})" for e in self.ended]
        return f"ended {len(self.ended)} stale process{'es' if len(self.ended) != 1 else ''}: " + (
            ", ".join(parts)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "grace_s": self.grace_s,
            "ended": [e.to_json() for e in self.ended],
        }


def _wait_gone(
    procs: Iterable[Candidate],
    signaller: Signaller,
    timeout: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> set[int]:
    """Poll until every process is gone or `timeout` passes; the pids still alive."""
    pending = {c.proc.pid: c for c in procs}
    deadline = clock() + timeout
    while True:
        pending = {pid: c for pid, c in pending.items() if signaller.alive(c.proc)}
        if not pending or clock() >= deadline:
            return set(pending)
        sleep(0.05)


def reap_stale(
    *,
    proc_root: Path = Path("/proc"),
    self_pid: int | None = None,
    grace: float = 5.0,
    kill_wait: float = 3.0,
    signaller: Signaller | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ReapResult:
    """Find and end stale Ray/SGLang processes (see the module docstring for the rules)."""
    me = os.getpid() if self_pid is None else self_pid
    candidates, scanned = find_stale(proc_root, me)
    own = signaller is None
    sig = signaller if signaller is not None else ProcSignaller(proc_root=proc_root)
    outcome: dict[int, tuple[str | None, str | None]] = {}
    try:
        termed: list[Candidate] = []
        for cand in candidates:
            try:
                if sig.send(cand.proc, signal.SIGTERM):
                    termed.append(cand)
                    outcome[cand.proc.pid] = ("SIGTERM", None)
                else:
                    outcome[cand.proc.pid] = (None, None)
            except OSError as err:
                outcome[cand.proc.pid] = (None, f"SIGTERM failed: {err}")
        alive = _wait_gone(termed, sig, grace, sleep, clock)
        killed = [c for c in termed if c.proc.pid in alive]
        for cand in killed:
            try:
                if sig.send(cand.proc, signal.SIGKILL):
                    outcome[cand.proc.pid] = ("SIGKILL", None)
            except OSError as err:
                outcome[cand.proc.pid] = ("SIGTERM", f"SIGKILL failed: {err}")
        still = _wait_gone(killed, sig, kill_wait, sleep, clock)
    finally:
        if own:
            sig.close()
    ended: list[Ended] = []
    for cand in candidates:
        signame, error = outcome.get(cand.proc.pid, (None, None))
        alive_now = cand.proc.pid in still or error is not None
        ended.append(
            Ended(
                pid=cand.proc.pid,
                name=cand.proc.name,
                comm=cand.proc.comm,
                argv=cand.proc.argv,
                rule=cand.rule,
                signal=signame,
                ended=not alive_now,
                error=error or ("still alive after SIGKILL" if cand.proc.pid in still else None),
            )
        )
    result = ReapResult(scanned=scanned, ended=tuple(ended), grace_s=grace)
    failed = [e for e in ended if not e.ended]
    if failed:
        listing = "; ".join(f"{e.name} (pid {e.pid}): {e.error}" for e in failed)
        raise ReapFailed(
            f"could not end {len(failed)} stale process{'es' if len(failed) != 1 else ''}: "
            f"{listing}",
            hint="run the job container with its own PID namespace and as root, or end them "
            "on the runner; skip this step with --no-reap",
            details=result.to_json(),
        )
    return result
