"""``rocmenv gc``: find containers and volumes made by rocmenv whose owner is gone, and
remove them.

Every container rocmenv makes carries ``rocmenv.owner-pid``, ``rocmenv.owner-host`` and
``rocmenv.owner-start`` (boot id + start time of the owner, so a reused pid does not pass
for the owner); so do the scratch volumes of an untrusted checkout's overlay
(:mod:`rocmenv.engine.overlay`). One is removed only when its owner ran on this host and is
gone; the verdict is checked again just before each removal. Never one whose owner is
alive. Containers go first: a volume's overlay is unmounted with its container.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace

from rocmenv.container.labels import (
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    LABEL_PROFILE,
    process_start,
)
from rocmenv.engine.protocol import Engine
from rocmenv.errors import EngineError


@dataclass(frozen=True, kw_only=True)
class Leftover:
    id: str
    name: str
    state: str
    profile: str
    owner_pid: int | None
    owner_host: str
    verdict: str  # "remove" | "keep"
    reason: str
    kind: str = "container"  # or "volume" (an overlay's scratch volume: id = name)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "profile": self.profile,
            "owner_pid": self.owner_pid,
            "owner_host": self.owner_host,
            "verdict": self.verdict,
            "reason": self.reason,
        }


def _judge(labels: dict[str, str], here: str) -> tuple[str, str, int | None]:
    host = labels.get(LABEL_OWNER_HOST, "")
    try:
        pid = int(labels.get(LABEL_OWNER_PID, ""))
    except ValueError:
        return "keep", "no owner pid label", None
    if host != here:
        return "keep", f"owned by a process on {host or 'an unknown host'}", pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "remove", f"owner pid {pid} is gone", pid
    except PermissionError:
        pass  # exists, owned by someone else
    recorded = labels.get(LABEL_OWNER_START)
    current = process_start(pid)
    if recorded and current and recorded != current:
        return "remove", f"owner pid {pid} is gone (the pid now belongs to another process)", pid
    return "keep", f"owner pid {pid} is alive", pid


def find_leftovers(engine: Engine) -> list[Leftover]:
    """Containers labelled by rocmenv, each judged: remove only when its owner is gone."""
    here = socket.gethostname()
    out = []
    for c in engine.list_containers(labels={LABEL_OWNER_PID: None}):
        labels = dict(c.labels)
        verdict, reason, pid = _judge(labels, here)
        out.append(
            Leftover(
                id=c.id,
                name=c.name,
                state=c.state,
                profile=labels.get(LABEL_PROFILE, ""),
                owner_pid=pid,
                owner_host=labels.get(LABEL_OWNER_HOST, ""),
                verdict=verdict,
                reason=reason,
            )
        )
    return out


def find_volumes(engine: Engine) -> list[Leftover]:
    """Volumes labelled by rocmenv (an overlay's scratch volumes), judged like containers."""
    here = socket.gethostname()
    out = []
    for volume in engine.list_volumes(labels={LABEL_OWNER_PID: None}):
        labels = dict(volume.labels)
        verdict, reason, pid = _judge(labels, here)
        out.append(
            Leftover(
                id=volume.name, name=volume.name, state="volume",
                profile=labels.get(LABEL_PROFILE, ""), owner_pid=pid,
                owner_host=labels.get(LABEL_OWNER_HOST, ""), verdict=verdict, reason=reason,
                kind="volume",
            )
        )  # fmt: skip
    return out


def collect_garbage(engine: Engine, *, dry_run: bool) -> list[Leftover]:
    """Remove the leftovers whose owner is gone (re-checked just before each removal):
    containers, then volumes."""
    judged = find_leftovers(engine)
    if dry_run:
        return judged + find_volumes(engine)
    here = socket.gethostname()
    out = []
    for item in judged:
        if item.verdict == "remove":
            try:
                doc = engine.inspect_container(item.id)
                labels = dict(((doc.get("Config") or {}).get("Labels")) or {})
            except EngineError:
                continue  # gone already
            verdict, reason, _ = _judge(labels, here)
            if verdict != "remove":
                item = replace(item, verdict=verdict, reason=reason)
            else:
                engine.remove(item.id, force=True)
        out.append(item)
    for item in find_volumes(engine):  # after the containers that mounted them
        if item.verdict == "remove":
            try:
                engine.remove_volume(item.id)
            except EngineError as err:  # still mounted by a container gc keeps: next time
                item = replace(item, verdict="keep", reason=f"not removed: {err.what}")
        out.append(item)
    return out
