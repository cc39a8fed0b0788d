"""The shim runtime: decide, apply, log and record, when a target module has been imported.

Lives in a launcher bundle as ``_rocmenv_launcher._runtime`` and is imported only when a
shim's target module is imported (never at interpreter start-up). Standard library only,
Python 3.8+. Version questions are answered by the vendored ``packaging`` 26.2
(``_rocmenv_launcher._vendor.packaging``), never by the container's own ``packaging``.

Environment (read when a target is imported, not at start-up):
  ROCMENV_SHIMS_STRICT=1   a failing shim raises ShimFailure (naming the shim) instead of warning
  ROCMENV_SHIMS_QUIET=1    no "shim ... applied" line on stderr (warnings still appear)
  ROCMENV_SHIMS_REPORT=F   append one JSON line per decision to F (O_APPEND, one write per line)
"""

from __future__ import annotations

import importlib
import os
import sys

MYPY = False
if MYPY:  # type checking only
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Dict, Iterable, Optional, Sequence, Set, Tuple

    Record = Dict[str, Any]

REPORT_VERSION = 1
_TRUE = ("1", "true", "yes", "on")
_PACKAGE = __name__.rpartition(".")[0]  # "_rocmenv_launcher" in a bundle


class ShimFailure(RuntimeError):
    """A shim failed and ROCMENV_SHIMS_STRICT=1 asked for that to be fatal."""


class Decision:
    """Whether a shim applies to what is installed, and why (shared with probe.py)."""

    __slots__ = ("apply", "distribution", "reason", "specifier_match", "version")

    def __init__(
        self,
        *,
        apply: bool,
        reason: str,
        distribution: Optional[str] = None,
        version: Optional[str] = None,
        specifier_match: Optional[bool] = None,
    ) -> None:
        self.apply = apply
        self.reason = reason
        self.distribution = distribution
        self.version = version
        self.specifier_match = specifier_match


def flag(name: str) -> bool:
    value = os.environ.get(name, "")  # pragma: no mutate (any default outside _TRUE is off)
    return value.strip().lower() in _TRUE


def load_shim(shim_id: str) -> Any:
    return importlib.import_module(_PACKAGE + ".shims." + shim_id)


def find_distribution(names: Tuple[str, ...]) -> Tuple[Optional[str], Optional[str]]:
    """The first of `names` that is installed, and its version (importlib.metadata)."""
    from importlib import metadata

    for name in names:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return name, version
    return None, None


def specifier_contains(specifier: str, version: str) -> Optional[bool]:
    """`packaging` semantics, pre-releases included; None when `version` is not PEP 440."""
    from ._vendor.packaging.specifiers import SpecifierSet
    from ._vendor.packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    return SpecifierSet(specifier).contains(parsed, prereleases=True)


def decide_version(shim: Any) -> Decision:
    """The distribution/specifier half of a decision (no import of the target needed)."""
    names = tuple(shim.DISTRIBUTIONS)
    dist, version = find_distribution(names)
    if dist is None or version is None:  # pragma: no mutate (both or neither: one test)
        return Decision(apply=False, reason="none of %s is installed" % ", ".join(names))
    match = specifier_contains(shim.SPECIFIER, version)
    if match is None:
        reason = "%s %s is not a PEP 440 version" % (dist, version)
    elif match:
        reason = "%s %s matches %s" % (dist, version, shim.SPECIFIER)
    else:
        reason = "%s %s is outside %s" % (dist, version, shim.SPECIFIER)
    return Decision(
        apply=bool(match), reason=reason, distribution=dist, version=version, specifier_match=match
    )


def missing_text(shim: Any) -> str:
    text = getattr(shim, "MISSING", "")  # pragma: no mutate (a None default is the same)
    return str(text or "probe found the feature missing")


class _Loader:
    """Wraps the real loader; once the module has executed, restores it and runs the shims."""

    def __init__(self, loader: Any, shim_ids: Tuple[str, ...]) -> None:
        self._loader = loader
        self._shim_ids = shim_ids

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        handle(module, self._shim_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


_busy: Set[str] = set()


def find_spec(
    finder: Any, name: str, path: Optional[Sequence[str]], target: Optional[ModuleType]
) -> Optional[ModuleSpec]:
    """Called by the sitecustomize finder for a target name: the real spec, loader wrapped.

    The other finders on sys.meta_path are asked in order (as the import system would);
    the spec's loader is wrapped so that the shims run right after the module executed.
    """
    if name in _busy:  # a finder below us asked importlib.util.find_spec for it: stay out
        return None
    _busy.add(name)
    try:
        spec = None
        for other in sys.meta_path:
            find = getattr(other, "find_spec", None)
            if other is finder or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
    finally:
        _busy.discard(name)
    if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
        spec.loader = _Loader(spec.loader, shim_ids(name))
    return spec


def shim_ids(target: str) -> Tuple[str, ...]:
    """The shims of a target module, from the bundle's generated index."""
    index = importlib.import_module(_PACKAGE + "._index")
    return tuple(index.TARGETS.get(target, ()))


def handle_preimported(targets: Iterable[str]) -> None:
    """At start-up: shim the targets some .pth file imported before sitecustomize ran."""
    for name in sorted(targets):
        module = sys.modules.get(name)
        if module is not None:
            try:
                handle(module, shim_ids(name))
            except ShimFailure as err:  # site.py would only print an exception: stop here
                raise SystemExit(str(err)) from err


def handle(module: ModuleType, shim_ids: Tuple[str, ...]) -> None:
    """Entry point from sitecustomize: `module` has just been executed."""
    for shim_id in shim_ids:
        _handle_one(module, shim_id)


def _handle_one(module: ModuleType, shim_id: str) -> None:
    name = shim_id
    record: Record = {"shim": name, "target": module.__name__}
    try:
        shim = load_shim(shim_id)
        name = record["shim"] = str(shim.NAME)
        decision = decide_version(shim)
        record.update(
            distribution=decision.distribution,
            version=decision.version,
            specifier=shim.SPECIFIER,
        )
        if decision.apply:
            if shim.probe(module):
                shim.apply(module)
                decision.reason += "; " + missing_text(shim)
            else:
                decision = Decision(
                    apply=False,  # pragma: no mutate (None reads as False too)
                    reason=decision.reason
                    + "; probe: %s already has the feature" % module.__name__,
                )
        record.update(decision="applied" if decision.apply else "skipped", reason=decision.reason)
    except Exception as err:
        what = "rocmenv: shim %s failed on import of %s: %s: %s" % (
            name,
            module.__name__,
            err.__class__.__name__,
            err,
        )
        record.update(decision="failed", reason="%s: %s" % (err.__class__.__name__, err))
        _report(record)
        if flag("ROCMENV_SHIMS_STRICT"):
            raise ShimFailure(what) from err
        sys.stderr.write(what + " (continuing; ROCMENV_SHIMS_STRICT=1 makes this fatal)\n")
        return
    if record["decision"] == "applied" and not flag("ROCMENV_SHIMS_QUIET"):
        sys.stderr.write("rocmenv: shim %s applied (%s)\n" % (name, record["reason"]))
    _report(record)


def _report(record: Record) -> None:
    path = os.environ.get("ROCMENV_SHIMS_REPORT")
    if not path:
        return
    import json
    import time

    record = dict(record)
    record.update(
        v=REPORT_VERSION,
        pid=os.getpid(),
        python="%d.%d.%d" % sys.version_info[:3],
        executable=sys.executable,
        time=round(time.time(), 6),  # pragma: no mutate (any precision under 1 ms)
    )
    text = json.dumps(record, sort_keys=True) + "\n"
    line = text.encode("utf-8")  # pragma: no mutate (the codec's name in any case)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, line)  # one write of one line: concurrent appenders do not interleave
        finally:
            os.close(fd)
    except OSError as err:
        sys.stderr.write("rocmenv: cannot append to ROCMENV_SHIMS_REPORT=%s: %s\n" % (path, err))
