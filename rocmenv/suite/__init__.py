"""Test suites across GPU slots: one container per test, packed onto a host's GPUs or a
Slurm cluster.

* :mod:`~rocmenv.suite.model` — the suite types and ``[suites.NAME]`` / ``[slurm]`` parsing;
* :mod:`~rocmenv.suite.discovery` — registration calls read from the files' AST (never
  imported) and bound to a declared signature;
* :mod:`~rocmenv.suite.registered` — a suite's ``discover`` table and the tests its
  registrations make (selection, GPU count);
* :mod:`~rocmenv.suite.policy` — timeouts and retries;
* :mod:`~rocmenv.suite.select` — cadence, labels, disabled;
* :mod:`~rocmenv.suite.history` — learned estimates (a file next to the lock);
* :mod:`~rocmenv.suite.balance` — the balanced split (and the reference's longest-first);
* :mod:`~rocmenv.suite.plan` — static partitions for CI matrices, the GitHub matrix;
* :mod:`~rocmenv.suite.packer` — the GPU-slot packer (a pure state machine);
* :mod:`~rocmenv.suite.drive` — the loop that drives it with real tests: attempts,
  timeouts, retries, cancellation;
* :mod:`~rocmenv.suite.local` — each test in its own container through the run pipeline;
* :mod:`~rocmenv.suite.slurm` — each test as a Slurm job, its container on the allocated
  node with exactly the allocated GPUs;
* :mod:`~rocmenv.suite.steps` — one allocation for the suite, each test a job step in it;
* :mod:`~rocmenv.suite.warm` — the allocation's warm node-side runner, and
  :mod:`~rocmenv.suite.stepclient` the step's standard-library process that hands it a test;
* :mod:`~rocmenv.suite.report` — final table, markdown summary, JSON;
* :mod:`~rocmenv.suite.junit` — JUnit XML, well-formed whatever the logs hold.
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
