"""The per-layer index on disk: one small JSON file per layer digest, ever.

A digest names a file here only once it is a valid digest (sha256/sha384/sha512 and its hex
length): a manifest's ``sha256:/some/path/planted`` must never become ``/some/path/planted.json``.
An index file is read under a size cap and checked for its shape; one that is not what
rocmenv writes is made again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rocmenv.contents.layer import INDEX_VERSION, LayerIndexJson
from rocmenv.context import Context
from rocmenv.errors import RegistryProtocolError
from rocmenv.hostfs import write_atomic

#: an index file larger than this is not one rocmenv wrote under the default limits
MAX_INDEX_FILE = 64 << 20


class LayerStore:
    """``$XDG_CACHE_HOME/rocmenv/layers/<algo>/<hex>.json``: one small file per layer ever
    read, written atomically; an index made for fewer shim targets is made again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._reading: dict[str, threading.Lock] = {}

    def index(
        self,
        digest: str,
        targets: Sequence[str],
        make: Callable[[], LayerIndexJson],
        *,
        max_bytes: int = MAX_INDEX_FILE,
    ) -> tuple[LayerIndexJson, bool]:
        """The layer's index, made (once, also when several threads ask at the same time)
        and stored when it is not there yet; ``True`` when it was made now. A stored file
        over ``max_bytes`` is made again."""
        with self._lock:
            key_lock = self._reading.setdefault(digest, threading.Lock())
        with key_lock:
            found = self.get(digest, targets, max_bytes=max_bytes)
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
        from rocmenv.grammar.reference import digest_problem

        problem = digest_problem(digest)
        if problem is not None:
            raise RegistryProtocolError(
                f"layer digest {digest[:200]!r} is not a valid digest: {problem.detail[:300]}",
                hint="the registry or a mirror sent a malformed manifest; nothing was read "
                "or written for it",
            )
        algo, _, hexpart = digest.partition(":")
        return self.root / algo / f"{hexpart}.json"

    def get(
        self, digest: str, targets: Iterable[str], *, max_bytes: int = MAX_INDEX_FILE
    ) -> LayerIndexJson | None:
        path = self._path(digest)
        try:
            with path.open("rb") as handle:
                data = handle.read(max_bytes + 1)
            doc: Any = json.loads(data) if len(data) <= max_bytes else None
        except (OSError, ValueError):
            return None
        if not _is_index(doc, digest) or not set(targets) <= set(doc["targets"]):
            return None
        index: LayerIndexJson = doc
        return index

    def put(self, index: LayerIndexJson) -> None:
        path = self._path(index["digest"])
        # the cache directory is rocmenv's own (XDG cache), never the checkout's
        write_atomic(path, json.dumps(index, sort_keys=True), durable=False, parents=True)


_SHAPE = {
    "digest": str,
    "media_type": str,
    "targets": list,
    "files": dict,
    "links": dict,
    "whiteouts": list,
    "opaque": list,
    "bytes": int,
    "size": int,
}


def _is_index(doc: object, digest: str) -> bool:
    """``doc`` has the shape :func:`rocmenv.contents.layer.index_layer` writes, for ``digest``."""
    if not isinstance(doc, dict) or doc.get("index_version") != INDEX_VERSION:
        return False
    if doc.get("digest") != digest:
        return False
    if not all(isinstance(doc.get(key), kind) for key, kind in _SHAPE.items()):
        return False
    texts = (*doc["files"].values(), *doc["links"].values(), *doc["whiteouts"], *doc["opaque"])
    return all(isinstance(t, str) for t in (*texts, *doc["targets"]))
