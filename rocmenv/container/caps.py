"""The resource caps of an untrusted container: part of the guard's one pass
(:meth:`rocmenv.container.guard.Guard.apply` calls :func:`cap`), from the policy's
``pids-limit``, ``memory``, ``shm-size`` and ``ulimits`` (:mod:`rocmenv.settings.policy`).

A fork's tests may fork-bomb, fill ``/dev/shm`` or allocate without end on a runner other
jobs share. So an untrusted container always has:

* a **pids limit** (the pids cgroup: processes and threads together). A profile without
  one (or ``0``/``-1``, "no limit") gets the policy's; one above it is refused;
* a **memory limit**, and no swap beyond it (``memory-swap`` = ``memory``). ``memory = "0"``
  (the built-in profiles' "no limit") or none gets the policy's; a profile asking more, or
  unlimited swap, is refused. The private ``/dev/shm`` is charged to the same cgroup. A
  share (``75%``) is of this host's memory; a rendering for another host (``options
  --format gha|compose``) leaves it out and says so;
* a bounded **shm-size**: a profile asking more than the policy's is refused;
* the policy's **ulimits** as maxima: ``core`` 0 (no core files: a crash of a many-GiB
  process writes no many-GiB file), ``nice`` and ``rtprio`` 0 (no raised or real-time
  priority: one busy real-time thread starves the runner's cores); a profile asking more is
  refused, one asking nothing gets them explicitly (Docker would inherit the daemon's, often
  unlimited). ``nproc`` (counted per user across the whole host, not per container) may
  only be lowered: at most ``pids-limit``.

Refusals name the key (``memory``, ``ulimits.core``, …) as the guard's other rules do.
"""

from __future__ import annotations

from rocmenv.container.runspec import HostFacts, RunSpec
from rocmenv.errors import ConfigError
from rocmenv.settings.policy import Policy, policy_bytes
from rocmenv.settings.profiles import Ulimit

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

#: (key, value, rule): what the guard lists in its one refusal.
Refusal = tuple[str, str, str]
UNLIMITED = -1


def cap(
    draft: RunSpec, policy: Policy, host: HostFacts
) -> tuple[dict[str, Any], list[str], list[Refusal]]:
    """The capped values of ``draft`` (fields of :class:`RunSpec`), the changes to say, and
    what is refused (module docstring)."""
    values: dict[str, Any] = {}
    changes: list[str] = []
    refused: list[Refusal] = []
    if host.check_host or not policy.memory.endswith("%"):
        values.update(_memory(draft, _memory_cap(policy, host), changes, refused))
    else:  # rendering for another host (gha, compose): a share of which memory?
        changes.append(f"memory: the policy's {policy.memory} of the runner's memory is not "
                       "rendered for another host")  # fmt: skip
    here = host.memory_total() if host.check_host else None
    shm = policy_bytes(policy.shm_size, here)
    if draft.shm_size is not None and shm is not None and _bytes(draft.shm_size) > shm:
        refused.append(("shm-size", draft.shm_size, f"at most {policy.shm_size} (the policy's "
                        "shm-size)"))  # fmt: skip
    pids = draft.pids_limit
    if pids is None or pids <= 0:
        values["pids_limit"] = policy.pids_limit
        changes.append(f"pids-limit {policy.pids_limit}")
    elif pids > policy.pids_limit:
        refused.append(("pids-limit", str(pids), f"at most {policy.pids_limit} (the policy's)"))
    ulimits, added = _ulimits(draft, policy, refused)
    if added:
        values["ulimits"] = ulimits
        changes.append("ulimits " + ",".join(u.render() for u in added))
    return values, changes, refused


def _memory_cap(policy: Policy, host: HostFacts) -> int:
    found = policy_bytes(policy.memory, host.memory_total())
    if found is None:
        raise ConfigError(
            f"untrusted mode: the policy's memory = {policy.memory!r} is a share of this "
            "host's memory, which cannot be read here (/proc/meminfo)",
            hint='give the policy an absolute memory size (e.g. memory = "64g")',
        )
    return found


def _memory(
    draft: RunSpec, limit: int, changes: list[str], refused: list[Refusal]
) -> dict[str, Any]:
    """``memory`` at most ``limit`` (the policy's when unset or 0); ``memory-swap`` no more
    than that (equal to the memory: no swap)."""
    out: dict[str, Any] = {}
    memory = _bytes(draft.memory) if draft.memory is not None else 0
    if memory <= 0:
        out["memory"] = _size(limit)
    elif memory > limit:
        refused.append(("memory", str(draft.memory), f"at most {_size(limit)} (the policy's "
                        "memory)"))  # fmt: skip
    swap = draft.memory_swap
    if swap is not None and swap.strip() == "-1":
        refused.append(("memory-swap", swap, "no unlimited swap"))
    elif swap is None or _bytes(swap) == 0:
        out["memory_swap"] = out.get("memory", draft.memory)
        changes.append(f"memory {out['memory_swap']} (no swap)")
    elif _bytes(swap) > limit:
        refused.append(("memory-swap", swap, f"at most {_size(limit)} (the policy's memory)"))
    return out


def _ulimits(
    draft: RunSpec, policy: Policy, refused: list[Refusal]
) -> tuple[tuple[Ulimit, ...], list[Ulimit]]:
    """The draft's ulimits within the policy's maxima, and the policy's added where the
    profile sets none (an unlimited maximum is not set: the engine's default stands)."""
    maxima = {u.name: u for u in policy.ulimits}
    for given in draft.ulimits:
        most = maxima.get(given.name)
        if given.name == "nproc":
            most = Ulimit(name="nproc", soft=policy.pids_limit, hard=policy.pids_limit)
        if most is not None and _above(given.hard, most.hard):
            refused.append((f"ulimits.{given.name}", given.render(), f"at most {_limit(most)}"
                            + (" (no more than pids-limit)" if given.name == "nproc" else
                               " (the policy's ulimits)")))  # fmt: skip
    named = {u.name for u in draft.ulimits}
    added = [u for u in policy.ulimits if u.name not in named and u.hard != UNLIMITED]
    return (*draft.ulimits, *added), added


def _above(value: int, most: int) -> bool:
    if most == UNLIMITED:
        return False
    return value == UNLIMITED or value > most


def _limit(ulimit: Ulimit) -> str:
    return "unlimited" if ulimit.hard == UNLIMITED else str(ulimit.hard)


def _bytes(text: str) -> int:
    from rocmenv.settings.keys import parse_size

    return 0 if text.strip() in ("0", "-1") else parse_size(text)


def _size(count: int) -> str:
    """Bytes as Docker writes a size, in whole MiB (at least 1m)."""
    return f"{max(count >> 20, 1)}m"
