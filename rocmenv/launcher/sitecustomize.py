# rocmenv-launcher-sitecustomize: see _rocmenv_launcher/_runtime.py. Compiled at every start.
import os
import sys

MYPY = False
if MYPY:  # type checking only (type comments below: ruff does not read them)
    from importlib.machinery import ModuleSpec  # noqa: F401
    from types import ModuleType  # noqa: F401
    from typing import Optional, Sequence  # noqa: F401

_TARGETS = set("".split())  # rocmenv:index: one string, O(1) to compile  # noqa: SIM905
_HERE = os.path.dirname(os.path.abspath(__file__))


class _Finder:
    def find_spec(self, name, path=None, target=None):
        # type: (str, Optional[Sequence[str]], Optional[ModuleType]) -> Optional[ModuleSpec]
        if name in _TARGETS:  # only the exact target names: the rest is in _runtime
            try:
                from _rocmenv_launcher._runtime import find_spec  # type: ignore[import-not-found]
            except ImportError as err:
                sys.stderr.write("rocmenv: shims off, no launcher runtime: %s\n" % err)
                _TARGETS.clear()
                return None
            return find_spec(self, name, path, target)  # type: ignore[no-any-return]
        return None


def _chain():
    # type: () -> None
    # Run the next sitecustomize on sys.path (Debian's), skipping other rocmenv launchers.
    finder = sys.modules["_frozen_importlib_external"].PathFinder
    rest = [os.path.abspath(p or ".") for p in sys.path]
    rest = rest[rest.index(_HERE) + 1 :] if _HERE in rest else rest  # a copy of ours: marked
    spec = finder.find_spec("sitecustomize", rest)
    while spec and spec.origin:
        with open(spec.origin, "rb") as f:
            if b"rocmenv-launcher-sitecustomize" not in f.read(99):  # pragma: no mutate (line 1)
                module = sys.modules["_frozen_importlib"].module_from_spec(spec)
                try:
                    spec.loader.exec_module(module)
                except Exception as e:  # as site.py reports its own sitecustomize failing
                    sys.stderr.write(
                        "Error in sitecustomize %s; %s: %s\n" % (spec.origin, type(e).__name__, e)
                    )
                return
        there = os.path.dirname(spec.origin)
        # `there` is one of `rest` (PathFinder searched those): the else is a safety net
        rest = rest[rest.index(there) + 1 :] if there in rest else []  # pragma: no mutate
        spec = finder.find_spec("sitecustomize", rest)


def _cache_pyc(code):
    # type: (object) -> None
    # Python writes our .pyc to a writable __pycache__ (a tmpfs per container, see
    # LauncherBundle.pycache_dir) unless PYTHONDONTWRITEBYTECODE is set: then we do it.
    ext = sys.modules["_frozen_importlib_external"]
    pyc = ext.cache_from_source(__file__)
    if not os.path.exists(pyc) and os.access(os.path.dirname(pyc), os.W_OK):
        st = os.stat(__file__)
        ext._write_atomic(pyc, ext._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))


try:
    if sys.dont_write_bytecode:
        _cache_pyc(sys._getframe().f_code)
except Exception:  # a cache only: never in the way
    pass
try:
    if os.environ.get("ROCMENV_SHIMS", "").strip().lower() not in ("0", "false", "no", "off"):
        sys.meta_path.insert(0, _Finder())
        if _TARGETS.intersection(sys.modules):  # imported before us (by a .pth file?)
            from _rocmenv_launcher._runtime import handle_preimported

            handle_preimported(_TARGETS)
finally:
    _chain()
