"""The in-container launcher: code that runs inside foreign containers, on Python 3.9+.

Nothing here is imported by the in-container code itself; this package only names the files
the bundle builder (:mod:`rocmenv.shims.bundle`) assembles into a launcher bundle::

    <bundle>/sitecustomize.py              startup: lazy import hook + chain-load (index embedded)
    <bundle>/probe.py                      `python3 <bundle>/probe.py`: JSON facts about an image
    <bundle>/_rocmenv_launcher/_runtime.py decisions, version matching, logging, reports
    <bundle>/_rocmenv_launcher/_index.py   generated: full metadata of the bundled shims
    <bundle>/_rocmenv_launcher/shims/*.py  the shim files (catalogue + entry points)
    <bundle>/_rocmenv_launcher/_vendor/packaging/  packaging 26.2, private name

Everything in this directory except this file must import only the standard library. The
supported floor is Python 3.9, the oldest Python it is tested on in real containers (the
test family's Debian bullseye images; also 3.11 and 3.13). Ruff still checks the syntax with
``target-version = "py38"``, but 3.8 is not a claim: no Python 3.8 can be obtained on this
project's CI machines (Debian never shipped it as python3 — buster has 3.7, bullseye 3.9 —
and uv / pbs-installer download their builds from GitHub, which CI cannot reach).
"""

from pathlib import Path

__all__ = ["CONTAINER_DIR", "INDEX_LINE", "MARKER", "PACKAGE", "SOURCE_DIR"]

#: Where `rocmenv run` mounts the bundle and what it prepends to PYTHONPATH.
CONTAINER_DIR = "/opt/rocmenv/launcher"
#: The private package name the runtime, the index, the shims and vendored packaging live under.
PACKAGE = "_rocmenv_launcher"
#: The line of sitecustomize.py that the bundle builder replaces with the generated index.
INDEX_LINE = (
    '_TARGETS = set("".split())  # rocmenv:index: one string, O(1) to compile  # noqa: SIM905'
)
#: A string every launcher sitecustomize.py carries, so launchers can recognise each other.
MARKER = "rocmenv-launcher-sitecustomize"

SOURCE_DIR = Path(__file__).resolve().parent
