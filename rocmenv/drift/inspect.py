"""Drift ``--inspect``: read the pinned and the new image, and compare what is inside.

Packages (PEP 503 names, old → new), ROCm and Python versions, and shim verdicts, read from
the registry without pulling (:class:`RegistryProber`, :mod:`rocmenv.contents`: layers are
streamed once into a per-layer index, nothing enters the engine), or with
``--inspect-from engine`` from the launcher probe run in a container (:class:`EngineProber`,
pulled by digest). Results are cached by ``linux/amd64`` manifest digest in
:class:`ProbeCache`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Literal

from rocmenv.contents.diff import diff_packages, diff_shims
from rocmenv.drift.check import (
    ImageDrift,
    ImageFacts,
    Inspection,
    Problem,
)
from rocmenv.errors import (
    CheckFailed,
    ConfigError,
    EngineError,
    RegistryError,
    RocmenvError,
)
from rocmenv.grammar.reference import Reference, parse
from rocmenv.registry.client import RegistryClient


def facts_from_probe(reference: str, probe: Mapping[str, Any]) -> ImageFacts:
    python = probe.get("python") or {}
    rocm = probe.get("rocm") or {}
    dists = probe.get("distributions") or {}
    shims = probe.get("shims") or []
    return ImageFacts(
        reference=reference,
        python=python.get("version"),
        rocm=rocm.get("version"),
        distributions=tuple(sorted((str(k), str(v)) for k, v in dists.items())),
        shims=tuple(sorted((str(s["name"]), s.get("would_apply")) for s in shims)),
    )


def compare(against: Literal["moved", "newer"], pinned: ImageFacts, new: ImageFacts) -> Inspection:
    return Inspection(
        against=against,
        new_reference=new.reference,
        pinned=pinned,
        new=new,
        packages=diff_packages(pinned.distributions, new.distributions),
        shims=diff_shims(pinned.shims, new.shims),
    )


Prober = Callable[[str], Mapping[str, Any]]  # engine reference -> probe.py's JSON


class ProbeCache:
    """Probe results by ``linux/amd64`` manifest digest: each image is probed once per run,
    also when several threads ask for it at the same time."""

    def __init__(self, prober: Prober) -> None:
        self._prober = prober
        self._lock = threading.Lock()
        self._keys: dict[str, threading.Lock] = {}
        self._facts: dict[str, ImageFacts] = {}
        self.probes = 0

    def facts(self, platform_digest: str, reference: str) -> ImageFacts:
        with self._lock:
            key_lock = self._keys.setdefault(platform_digest, threading.Lock())
        with key_lock:
            if platform_digest not in self._facts:
                probe = self._prober(reference)
                with self._lock:
                    self.probes += 1
                self._facts[platform_digest] = facts_from_probe(reference, probe)
            cached = self._facts[platform_digest]
            return replace(cached, reference=reference)


def inspect_one(client: RegistryClient, cache: ProbeCache, result: ImageDrift) -> ImageDrift:
    """Probe the pinned and the new image of a drifted entry and compare them."""
    from rocmenv.image.pinning import engine_reference

    entry = result.target.entry
    if result.status != "drift":
        return result
    if (
        result.tag_state == "moved"
        and result.current_digest
        and (not entry.constraints or not result.newest_digest)
    ):
        against: Literal["moved", "newer"] = "moved"
        digest = result.current_digest
    elif result.newest_digest:
        against, digest = "newer", result.newest_digest
    else:  # a tag that is gone: nothing to compare with
        return result
    repo = parse(entry.repository)
    via_mirror = client.settings.pull_from_mirror
    new_ref = engine_reference(
        entry.repository, digest, entry.registry, pull_from_mirror=via_mirror
    ).familiar
    try:
        image = client.resolve_platform(
            Reference(domain=repo.domain, path=repo.path, digest=digest)
        )
        new_ref = engine_reference(
            entry.repository, digest, image.registry, pull_from_mirror=via_mirror
        ).familiar
        pinned = cache.facts(
            entry.platform_digest,
            engine_reference(
                entry.repository, entry.digest, entry.registry, pull_from_mirror=via_mirror
            ).familiar,
        )
        new = cache.facts(image.platform_digest, new_ref)
    except (RegistryError, EngineError, ConfigError, CheckFailed) as err:
        problem = Problem.of(err)
        return replace(
            result, inspection=Inspection(against=against, new_reference=new_ref, problem=problem)
        )
    return replace(result, inspection=compare(against, pinned, new))


def inspect_all(
    client: RegistryClient, cache: ProbeCache, results: Sequence[ImageDrift], *, jobs: int = 2
) -> list[ImageDrift]:
    drifted = [r for r in results if r.status == "drift"]
    if not drifted:
        return list(results)
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(drifted)))) as pool:
        inspected = dict(
            zip(
                map(id, drifted),
                pool.map(lambda r: inspect_one(client, cache, r), drifted),
                strict=True,
            )
        )
    return [inspected.get(id(r), r) for r in results]


class RegistryProber:
    """The image's contents from the registry (:func:`rocmenv.contents.image.read_image`)."""

    def __init__(self, client: RegistryClient, store: Any, shims: Sequence[Any]) -> None:
        self._client, self._store, self._shims = client, store, shims
        self.bytes_read = 0
        self._lock = threading.Lock()

    def __call__(self, reference: str) -> Mapping[str, Any]:
        from rocmenv.contents.image import read_image

        doc, stats = read_image(self._client, self._store, parse(reference), self._shims)
        with self._lock:
            self.bytes_read += stats.bytes_read
        return doc


class EngineProber:
    """Pull by digest (when absent) and run the launcher probe through a container engine.

    The engine and the launcher bundle are made on first use, so ``drift`` without drift
    never touches the engine; when that fails, every later call fails the same way at once.
    """

    def __init__(
        self,
        open_engine: Callable[[], Any],
        open_bundle: Callable[[], Any],
        *,
        timeout: float = 300.0,
    ) -> None:
        self._open_engine = open_engine
        self._open_bundle = open_bundle
        self._timeout = timeout
        self._lock = threading.Lock()
        self._engine: Any = None
        self._bundle: Any = None
        self._failed: RocmenvError | None = None

    def _ready(self) -> tuple[Any, Any]:
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if self._engine is None:
                try:
                    engine = self._open_engine()
                    engine.ping()
                    self._bundle = self._open_bundle()
                except (EngineError, ConfigError) as err:
                    self._failed = err
                    raise
                self._engine = engine
            return self._engine, self._bundle

    def __call__(self, reference: str) -> Mapping[str, Any]:
        from rocmenv.engine.container import EngineCapture
        from rocmenv.shims.probe import check_image_versions

        engine, bundle = self._ready()
        if not engine.image_exists(reference):
            engine.pull(reference)
        probe = check_image_versions(
            EngineCapture(engine), reference, bundle=bundle, timeout=self._timeout
        )
        return dict(probe)


# -- verdict ------------------------------------------------------------------------------------
