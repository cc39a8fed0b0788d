"""Every label rocmenv puts on a container, made in one place.

A run's container carries ``rocmenv.session`` (found again by a sweep after a failed
create), ``rocmenv.profile``, the owner's pid, host and start time (``rocmenv gc`` removes
containers whose owner is gone: the start time tells a reused pid apart) and the image
digest. Short-lived probe containers carry the same owner labels plus ``rocmenv.purpose``.
Profiles may add their own labels, never in the ``rocmenv.`` namespace.
"""

from __future__ import annotations

import _socket  # the C module: ``socket`` adds enum conversions and ``selectors`` (~2.5 ms a run)
import os
from pathlib import Path

from rocmenv.record import record

LABEL_PREFIX = "rocmenv."
LABEL_SESSION = "rocmenv.session"
LABEL_PROFILE = "rocmenv.profile"
LABEL_OWNER_PID = "rocmenv.owner-pid"
LABEL_OWNER_HOST = "rocmenv.owner-host"
LABEL_OWNER_START = "rocmenv.owner-start"  # "<boot id>:<start time>": survives pid reuse
LABEL_IMAGE_DIGEST = "rocmenv.image-digest"
LABEL_PURPOSE = "rocmenv.purpose"


@record
class Identity:
    """Who runs a container: a fresh session id and the owning process."""

    session: str
    owner_pid: int
    owner_host: str
    owner_start: str | None

    @classmethod
    def current(cls) -> Identity:
        pid = os.getpid()
        return cls(
            session=new_session(),
            owner_pid=pid,
            owner_host=_socket.gethostname(),
            owner_start=process_start(pid),
        )

    @property
    def container_name(self) -> str:
        return f"rocmenv-{self.session}"

    def labels(self) -> dict[str, str]:
        out = {
            LABEL_SESSION: self.session,
            LABEL_OWNER_PID: str(self.owner_pid),
            LABEL_OWNER_HOST: self.owner_host,
        }
        if self.owner_start:
            out[LABEL_OWNER_START] = self.owner_start
        return out


def new_session() -> str:
    return os.urandom(6).hex()


def run_labels(
    *, profile: str, identity: Identity | None, image_digest: str | None
) -> dict[str, str]:
    """The labels of a run's container (without the profile's own)."""
    labels = {LABEL_PROFILE: profile}
    if identity is not None:
        labels.update(identity.labels())
    if image_digest:
        labels[LABEL_IMAGE_DIGEST] = image_digest
    return labels


def capture_labels(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels of a short-lived probe container."""
    return {**Identity.current().labels(), LABEL_PURPOSE: "capture", **(extra or {})}


def process_start(pid: int) -> str | None:
    """``<boot id prefix>:<start time in clock ticks>`` of a process, or None when it does
    not exist (or /proc is unavailable). A pid reused after the owner died, or after a
    reboot, gives another value."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None
