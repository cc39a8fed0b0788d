"""The start-up budget of ``rocmenv run`` (issue 20), shared by the unit test of its imports
(``tests/unit/test_lazy.py``) and the end-to-end one (``tests/integration/run/test_startup_budget.py``)."""

from __future__ import annotations

#: What a plain ``rocmenv run`` must not import (docs/benchmarks.md: its start-up budget):
#: ``dataclasses`` (with ``inspect``, ``ast``, ``dis``: rocmenv.record), OpenSSL through
#: ``hashlib`` (the launcher bundle's stat-only stamp), ``shutil`` (``bz2``, ``lzma``), ``difflib``,
#: ``socket``, ``selectors``, ``signal``, ``struct``, ``zlib``
RUN_UNUSED = {
    "importlib.metadata", "packaging", "rocmenv.launcher._vendor.packaging",
    "rocmenv.shims.probe", "rocmenv.container.guard", "rocmenv.container.caps", "rocmenv.run.planted",
    "rocmenv.run.output", "tarfile",
    "rocmenv.run.pull", "rocmenv.registry", "urllib3", "ssl", "docker", "secrets",
    "dataclasses", "inspect", "ast", "dis", "hashlib", "_hashlib", "shutil", "bz2", "lzma",
    "difflib", "tempfile", "rocmenv.image.lock", "rocmenv.suite",
    # only on an error: the report (rocmenv.cli._common), the engine's hints
    "rocmenv.cli._common", "rocmenv.engine.hints",
    # the C ``_socket`` serves the engine's unix socket (``socket``'s enums, ``selectors``),
    # the C ``_signal`` the run's signals (``signal``'s enums: imported once interrupted);
    # extension modules, ~0.3 ms each: the attach frames' sizes by ``int.from_bytes``, the
    # bundle stamp's name by ``int``'s modulo
    "socket", "selectors", "signal", "struct", "_struct", "zlib",
}  # fmt: skip

#: What importing the run path must not import either — typing's names are read under
#: ``if TYPE_CHECKING:`` (rocmenv.typecheck), a tag's date is checked without ``datetime`` —
#: though a run that reads a project file gets both from ``tomllib``
IMPORT_UNUSED = {"typing", "datetime"}

#: Every rocmenv module a plain run may import; one more is a deliberate change of this list.
RUN_MODULES = {
    "rocmenv", "rocmenv.cli", "rocmenv.cli.run", "rocmenv.context",
    "rocmenv.engine", "rocmenv.engine.attach", "rocmenv.engine.container",
    "rocmenv.engine.docker_api", "rocmenv.engine.protocol",
    "rocmenv.engine.select", "rocmenv.engine.wire",
    # issue 31: the answer reader (split from wire), the overlay's and the volumes' calls
    "rocmenv.engine.answer", "rocmenv.engine.overlay", "rocmenv.engine.volumes",
    "rocmenv.engine.cli_command", "rocmenv.errors", "rocmenv.grammar",
    "rocmenv.grammar.reference", "rocmenv.grammar.tags", "rocmenv.hostfs", "rocmenv.image",
    "rocmenv.image.pinning", "rocmenv.lazy", "rocmenv.record", "rocmenv.redact", "rocmenv.run",
    "rocmenv.escape",  # (issue 31: the one escaping function; nothing compiled at import)
    "rocmenv.joblog",  # (issue 31: the container's output goes where it decides)
    "rocmenv.run.execute", "rocmenv.run.interrupt", "rocmenv.run.stages", "rocmenv.settings",
    "rocmenv.settings.choices", "rocmenv.settings.files", "rocmenv.settings.host", "rocmenv.settings.images",
    "rocmenv.settings.keys", "rocmenv.settings.policy", "rocmenv.settings.profile_set",
    "rocmenv.settings.profiles", "rocmenv.settings.project", "rocmenv.settings.registry",
    "rocmenv.settings.resolve", "rocmenv.settings.site", "rocmenv.settings.slurm",
    "rocmenv.settings.declared",  # (issue 33: every setting declared once; the readers read it)
    "rocmenv.typecheck", "rocmenv.container", "rocmenv.container.builder", "rocmenv.container.gpu", "rocmenv.container.hostpaths",
    "rocmenv.container.labels", "rocmenv.container.plan", "rocmenv.container.render", "rocmenv.container.runspec",
    # the GPU pool (which GPUs this runner owns: an ARC pod's device list), for a GPU run
    "rocmenv.container.pool",
    # with the shim launcher (its bundle reused: nothing of the vendored packaging)
    "rocmenv.launcher", "rocmenv.shims", "rocmenv.shims.bundle", "rocmenv.shims.catalogue",
}  # fmt: skip
