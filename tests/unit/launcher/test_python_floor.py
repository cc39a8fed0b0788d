"""The launcher's Python floor is the oldest Python the test family runs it on in a container.

docs/architecture.md and the launcher claim a floor; the integration tests run the launcher in the
family's images (tests/integration/shims/test_shims_containers.py, oldest and newest Python). This
checks that the claim and the family agree, so neither can move alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from rocmenv import launcher
from tests.support import testenv

REPO = Path(__file__).resolve().parents[3]


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def test_the_claimed_floor_is_the_oldest_python_in_the_family() -> None:
    claim = re.search(r"on Python (\d+\.\d+)\+", launcher.__doc__ or "")
    assert claim is not None
    documented = re.search(
        r"launcher/ .*Python (\d+\.\d+)\+", (REPO / "docs" / "architecture.md").read_text()
    )
    assert documented is not None and documented.group(1) == claim.group(1)
    family = testenv.load_family()
    oldest = min(_version(b.python) for b in family.bases.values())
    assert _version(claim.group(1)) == oldest
    # and an image on that Python exists for the container tests to run the launcher in
    assert family.select(python=claim.group(1))
