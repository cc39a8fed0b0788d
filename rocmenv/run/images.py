"""What rocmenv pulled and when, and ``gc --images``: removing the images nobody needs.

The record is ``$XDG_DATA_HOME/rocmenv/images.json`` (``~/.local/share/rocmenv``), keyed by
image id: the references pulled and when. It is written atomically (temp file + rename) under
an exclusive ``flock`` on a sidecar lock file, with a version field, and read back strictly.

An image is removed by :func:`plan_image_gc` only when rocmenv pulled it (or
``include_foreign`` says any image may go), no lockfile entry references its digest, no
container (in any state) uses it, and it was pulled longer ago than ``older_than``; oldest
first, and with ``max_disk`` only until the images left fit in it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

from rocmenv.context import Context
from rocmenv.engine.protocol import Engine, LocalImage
from rocmenv.errors import ConfigError
from rocmenv.hostfs import write_atomic

STATE_VERSION = 1


class PulledJson(TypedDict):
    refs: list[str]
    pulled_at: str  # ISO 8601, UTC


class StateJson(TypedDict):
    state_version: int
    images: dict[str, PulledJson]


@dataclass(frozen=True, kw_only=True)
class Pulled:
    image_id: str
    refs: tuple[str, ...]
    pulled_at: dt.datetime


def state_path(ctx: Context) -> Path:
    base = ctx.env.get("XDG_DATA_HOME") or str(
        Path(ctx.env.get("HOME") or Path.home()) / ".local" / "share"
    )
    return Path(base) / "rocmenv" / "images.json"


@contextlib.contextmanager
def _locked(path: Path, within: Path) -> Iterator[None]:
    """The record's sidecar lock, opened without following a link inside ``within``."""
    from rocmenv.hostfs import open_append

    fd = open_append(path.with_suffix(".lock"), within=within, parents=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read(path: Path) -> dict[str, Pulled]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"the image record {path} is unreadable: {err}",
            hint="delete it (rocmenv then forgets which images it pulled)",
        ) from None
    if not isinstance(doc, dict) or doc.get("state_version") != STATE_VERSION:
        raise ConfigError(
            f"the image record {path} has state_version {doc.get('state_version') if isinstance(doc, dict) else '?'}"
            f", this rocmenv reads {STATE_VERSION}",
            hint="upgrade rocmenv, or delete the file",
        )
    out = {}
    for image_id, entry in (doc.get("images") or {}).items():
        try:
            when = dt.datetime.fromisoformat(entry["pulled_at"])
            out[image_id] = Pulled(image_id=image_id, refs=tuple(entry["refs"]), pulled_at=when)
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"the image record {path} has a malformed entry for {image_id}",
                hint="delete the file",
            ) from None
    return out


def _write(path: Path, records: dict[str, Pulled], within: Path) -> None:
    doc: StateJson = {
        "state_version": STATE_VERSION,
        "images": {
            r.image_id: {"refs": sorted(r.refs), "pulled_at": r.pulled_at.isoformat()}
            for r in records.values()
        },
    }
    write_atomic(path, json.dumps(doc, sort_keys=True, indent=1), within=within)


def load_pulled(ctx: Context) -> dict[str, Pulled]:
    return _read(state_path(ctx))


def record_pull(ctx: Context, image_id: str, ref: str, when: dt.datetime | None = None) -> None:
    path = state_path(ctx)
    when = when or dt.datetime.now(dt.timezone.utc)
    with _locked(path, ctx.checkout):
        records = _read(path)
        old = records.get(image_id)
        refs = tuple(sorted({*(old.refs if old else ()), ref}))
        records[image_id] = Pulled(image_id=image_id, refs=refs, pulled_at=when)
        _write(path, records, ctx.checkout)


def forget(ctx: Context, image_ids: Iterable[str]) -> None:
    path = state_path(ctx)
    with _locked(path, ctx.checkout):
        records = _read(path)
        for image_id in image_ids:
            records.pop(image_id, None)
        _write(path, records, ctx.checkout)


Verdict = Literal["remove", "keep"]


@dataclass(frozen=True, kw_only=True)
class ImageVerdict:
    image: LocalImage
    verdict: Verdict
    reason: str
    pulled_at: dt.datetime | None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.image.id,
            "tags": list(self.image.repo_tags),
            "digests": list(self.image.repo_digests),
            "size": self.image.size,
            "pulled_at": self.pulled_at.isoformat() if self.pulled_at else None,
            "verdict": self.verdict,
            "reason": self.reason,
        }


def images_in_use(engine: Engine) -> set[str]:
    """Ids of the images of every container, running or not."""
    used = set()
    for container in engine.list_containers(labels={}):
        with contextlib.suppress(Exception):
            used.add(str(engine.inspect_container(container.id).get("Image", "")))
    return used


def plan_image_gc(
    images: list[LocalImage],
    pulled: dict[str, Pulled],
    *,
    locked_digests: set[str],
    in_use: set[str],
    now: dt.datetime,
    older_than: dt.timedelta | None = None,
    max_disk: int | None = None,
    include_foreign: bool = False,
) -> list[ImageVerdict]:
    """Which images to remove (oldest pull first) and why the others stay."""
    verdicts: list[ImageVerdict] = []
    candidates: list[tuple[dt.datetime, LocalImage]] = []
    for image in images:
        record = pulled.get(image.id)
        when = record.pulled_at if record else None
        digests = {d.split("@", 1)[1] for d in image.repo_digests if "@" in d}

        def keep(reason: str, image: LocalImage = image, when: dt.datetime | None = when) -> None:
            verdicts.append(
                ImageVerdict(image=image, verdict="keep", reason=reason, pulled_at=when)
            )

        if record is None and not include_foreign:
            keep("not pulled by rocmenv")
        elif digests & locked_digests:
            keep("referenced by a lockfile")
        elif image.id in in_use:
            keep("used by a container")
        elif older_than is not None and when is not None and now - when < older_than:
            keep(f"pulled less than {older_than} ago")
        else:
            epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
            candidates.append((when or epoch, image))
    candidates.sort(key=lambda pair: (pair[0], pair[1].id))
    total = sum(image.size for image in images)
    for _when, image in candidates:
        record = pulled.get(image.id)
        if max_disk is not None and total <= max_disk:
            verdicts.append(
                ImageVerdict(
                    image=image,
                    verdict="keep",
                    reason="the store is within --max-disk",
                    pulled_at=record.pulled_at if record else None,
                )
            )
            continue
        total -= image.size
        verdicts.append(
            ImageVerdict(
                image=image,
                verdict="remove",
                reason="unreferenced and unused",
                pulled_at=record.pulled_at if record else None,
            )
        )
    return verdicts


def parse_duration(text: str) -> dt.timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s``."""
    import re

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw])\s*", text.lower())
    if not match:
        from rocmenv.errors import UsageError

        raise UsageError(f"{text!r} is not a duration", hint="write e.g. 7d, 12h or 30m")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
    return dt.timedelta(seconds=float(match.group(1)) * unit)
