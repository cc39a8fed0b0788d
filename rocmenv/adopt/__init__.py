"""Adopting rocmenv in a repository: ``rocmenv init`` reads what the repository already has
(a workflow's job container, its tests' registration calls) and writes the project file.

* :mod:`~rocmenv.adopt.workflow` — a workflow job's container, ``env:`` and suite (PyYAML);
* :mod:`~rocmenv.adopt.dockerflags` — docker flags as profile keys, and the ones refused;
* :mod:`~rocmenv.adopt.clients` — miles and sglang as their own CI tooling works;
* :mod:`~rocmenv.adopt.scan` — the AMD/ROCm suites the tests register;
* :mod:`~rocmenv.adopt.write` — the project file's text, the workflow to use;
* :mod:`~rocmenv.adopt.init` — the command: checked, then written atomically.
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "InitRequest": "init",
        "InitResult": "init",
        "init_project": "init",
        "option_set": "dockerflags",
    },
)
