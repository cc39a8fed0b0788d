# rocmenv-launcher-sitecustomize: lazy shims, see _rocmenv_launcher/_runtime.py.
# Compiled at every interpreter start (read-only mount, no .pyc): keep this file tiny.
import os
import sys

MYPY = False
if MYPY:  # type checking only
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Optional, Sequence

_INDEX: "dict[str, tuple[str, ...]]" = {}  # rocmenv:index
_HERE = os.path.dirname(os.path.abspath(__file__))


class _Finder:
    """Reacts only to the exact target names of _INDEX; the rest is _runtime.find_spec."""

    def __init__(self, index: "dict[str, tuple[str, ...]]") -> None:
        self.index = index

    def find_spec(
        self,
        name: str,
        path: "Optional[Sequence[str]]" = None,
        target: "Optional[ModuleType]" = None,
    ) -> "Optional[ModuleSpec]":
        if name not in self.index:
            return None
        if "_rocmenv_launcher" not in sys.modules and _HERE not in sys.path:
            sys.path.append(_HERE)
        try:
            from _rocmenv_launcher._runtime import find_spec  # type: ignore[import-not-found]
        except ImportError as err:
            if os.environ.get("ROCMENV_SHIMS_STRICT", "").lower() in ("1", "true", "yes", "on"):
                raise
            sys.stderr.write("rocmenv: shims off, launcher runtime missing: %s\n" % err)
            return None
        return find_spec(self, name, path, target)  # type: ignore[no-any-return]


def _chain() -> None:
    # Run the next sitecustomize on sys.path (e.g. Debian's), skipping rocmenv launchers.
    finder = sys.modules["_frozen_importlib_external"].PathFinder
    rest = [os.path.abspath(p or ".") for p in sys.path]
    rest = rest[rest.index(_HERE) + 1 :] if _HERE in rest else rest
    spec = finder.find_spec("sitecustomize", rest)
    while spec is not None and spec.origin:
        with open(spec.origin, "rb") as f:
            theirs = b"rocmenv-launcher-sitecustomize" not in f.read(100)
        if theirs:
            module = sys.modules["_frozen_importlib"].module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as err:  # as site.py reports a failing sitecustomize
                sys.stderr.write(
                    "Error in sitecustomize %s; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                    % (spec.origin, type(err).__name__, err)
                )
            return
        there = os.path.dirname(spec.origin)
        rest = rest[rest.index(there) + 1 :] if there in rest else []
        spec = finder.find_spec("sitecustomize", rest)


try:
    if os.environ.get("ROCMENV_SHIMS", "").strip().lower() not in ("0", "false", "no", "off"):
        sys.meta_path.insert(0, _Finder(_INDEX))
        if [name for name in _INDEX if name in sys.modules]:  # imported before us (.pth?)
            from _rocmenv_launcher._runtime import handle_preimported

            handle_preimported(_INDEX)
finally:
    _chain()
