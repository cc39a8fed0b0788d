"""The start-up budget of a real ``rocmenv run`` (issue 20): what the process had imported
when it ended, against the engine — with the shim launcher and without. The unit test
(``tests/unit/test_lazy.py``) checks the run path's imports; this one runs it end to end,
so that an import made while running (argparse's formatter, the launcher bundle's reuse, the
tag grammar) counts too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    one_engine,
    project_fixture,
)
from tests.support.startup import RUN_MODULES, RUN_UNUSED

_PROBE = """
import os, sys
end = os._exit
def report(status):
    import gc
    sys.stderr.write(f"gc={gc.isenabled()},{gc.get_freeze_count() > 0}\\n")
    sys.stderr.write("modules=" + ",".join(sorted(sys.modules)) + "\\n")
    sys.stderr.flush()
    end(status)
os._exit = report
sys.argv = ["rocmenv", *sys.argv[1:]]
from rocmenv.cli import main
raise SystemExit(main())
"""


def _a_run(project: Project, engine: str, *flags: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "run", "--engine", engine, "--profile", "plain",
         "--pull", "never", "--image", project.image, *flags, "--", "true"],
        cwd=project.cwd, env=project.env(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def _modules_of_a_run(project: Project, engine: str, *flags: str) -> set[str]:
    line = next(x for x in _a_run(project, engine, *flags) if x.startswith("modules="))
    return set(line.removeprefix("modules=").split(","))


@pytest.mark.parametrize("flags", [(), ("--no-shims",)], ids=["shims", "no-shims"])
@one_engine
def test_a_run_imports_only_what_it_uses(project: Project, engine: str, flags: tuple[str]) -> None:
    _modules_of_a_run(project, engine, *flags)  # the first may build the launcher bundle
    modules = _modules_of_a_run(project, engine, *flags)
    assert RUN_UNUSED & modules == set()
    ours = {m for m in modules if m == "rocmenv" or m.startswith("rocmenv.")}
    assert ours - RUN_MODULES == set(), "new on the run path: update RUN_MODULES deliberately"
    assert ("rocmenv.shims.bundle" in ours) == (not flags)


@one_engine
def test_collection_pauses_for_the_start_up_and_resumes_once_the_container_exists(
    project: Project, engine: str
) -> None:
    # (rocmenv.cli.resume_collection: what start-up made is frozen, then collected no more)
    assert "gc=True,True" in _a_run(project, engine, "--no-shims")
