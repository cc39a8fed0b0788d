"""The tmux harness (tests.support.tmux): a pane of the asked size whose screen reads back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import testenv
from tests.support.run_project import wait_for
from tests.support.tmux import Pane


@pytest.fixture(autouse=True)
def tmux() -> Iterator[None]:
    testenv.need_tool("tmux", hint="scripts/setup.sh installs it")
    yield


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_a_pane_has_the_asked_size_and_its_screen_reads_back(width: int, height: int) -> None:
    with Pane(width, height, ["sh", "-c", "stty size; printf 'x%.0s' $(seq 100)"]) as pane:
        assert wait_for(lambda: pane.exit_status() == 0, 30)
        rows = pane.screen()
        assert rows[0] == f"{height} {width}"
        assert len(rows) <= height
        wrapped = [row for row in rows[1:] if row.startswith("x")]
        assert len(wrapped) == (1 if width > 100 else 2)  # 100 x's wrap at 80 columns
        assert "x" * 100 in pane.screen(joined=True)


def test_resize_changes_what_the_program_sees() -> None:
    with Pane(200, 50, ["sh", "-c", "read _; stty size"]) as pane:
        assert wait_for(lambda: pane.screen()[0] == "", 30)
        pane.resize(80, 24)
        pane.keys("Enter")
        assert wait_for(lambda: "24 80" in pane.text(), 30), pane.text()
