"""The per-layer index on disk: one small JSON file per layer digest, ever."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from rocmenv.contents.layer import INDEX_VERSION, LayerIndexJson
from rocmenv.context import Context
from rocmenv.hostfs import write_atomic


class LayerStore:
    """``$XDG_CACHE_HOME/rocmenv/layers/<algo>/<hex>.json``: one small file per layer ever
    read, written atomically; an index made for fewer shim targets is made again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._reading: dict[str, threading.Lock] = {}

    def index(
        self, digest: str, targets: Sequence[str], make: Callable[[], LayerIndexJson]
    ) -> tuple[LayerIndexJson, bool]:
        """The layer's index, made (once, also when several threads ask at the same time)
        and stored when it is not there yet; ``True`` when it was made now."""
        with self._lock:
            key_lock = self._reading.setdefault(digest, threading.Lock())
        with key_lock:
            found = self.get(digest, targets)
            if found is not None:
                return found, False
            made = make()
            self.put(made)
            return made, True

    @classmethod
    def default(cls, ctx: Context) -> LayerStore:
        base = ctx.env.get("XDG_CACHE_HOME") or str(
            Path(ctx.env.get("HOME") or Path.home()) / ".cache"
        )
        return cls(Path(base) / "rocmenv" / "layers")

    def _path(self, digest: str) -> Path:
        algo, _, hexpart = digest.partition(":")
        return self.root / algo / f"{hexpart}.json"

    def get(self, digest: str, targets: Iterable[str]) -> LayerIndexJson | None:
        try:
            doc: LayerIndexJson = json.loads(self._path(digest).read_text())
        except (OSError, ValueError):
            return None
        if doc.get("index_version") != INDEX_VERSION or not set(targets) <= set(doc["targets"]):
            return None
        return doc

    def put(self, index: LayerIndexJson) -> None:
        path = self._path(index["digest"])
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(index, sort_keys=True), durable=False)
