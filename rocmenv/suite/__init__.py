"""Test suites across GPU slots: one container per test, packed onto a host's GPUs or a
Slurm cluster.

* :mod:`~rocmenv.suite.model` — the suite types and ``[suites.NAME]`` / ``[slurm]`` parsing;
* :mod:`~rocmenv.suite.discovery` — tests found by a glob + registration call, read from the
  files' AST without importing them;
* :mod:`~rocmenv.suite.history` — learned estimates (a file next to the lock);
* :mod:`~rocmenv.suite.plan` — static partitions for CI matrices;
* :mod:`~rocmenv.suite.packer` — the GPU-slot packer (a pure state machine) and the loop that
  drives it with real tests;
* :mod:`~rocmenv.suite.local` — each test in its own container through the run pipeline;
* :mod:`~rocmenv.suite.slurm` — each test as a Slurm job, its container on the allocated
  node with exactly the allocated GPUs;
* :mod:`~rocmenv.suite.report` — final table, JUnit XML, markdown summary, JSON.
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "SuiteRunRequest": "runner",
        "run_suite": "runner",
        "load": "runner",
        "list_names": "runner",
        "Suite": "model",
        "SuiteTest": "model",
        "SuiteReport": "report",
    },
)
