"""The pull display's fitting and redrawing (rocmenv.run.progress); the same on a real
terminal, read off its screen: tests/integration/run/test_progress.py."""

from __future__ import annotations

import io
import re

import pytest

from rocmenv.engine.protocol import PullEvent
from rocmenv.run.progress import PullDisplay, fit_layer, fit_line, fit_reference
from rocmenv.run.pull import PullPlan

REF = "127.0.0.1:40123/rocmenv-test/some-long-repository-name@sha256:" + "0123456789abcdef" * 4
SUMMARY = ": 1.2 GB/3.4 GB (35%), 12.3 MB/s, ETA 2m05s"


@pytest.mark.parametrize("width", [200, 160, 120, 100, 80, 72, 64])
def test_a_line_fits_under_the_width_and_keeps_every_number(width: int) -> None:
    line = fit_line("rocmenv: pulling ", REF, SUMMARY, width)
    assert len(line) < width  # the last column would wrap on some terminals
    assert line.endswith(SUMMARY) or line == SUMMARY.removeprefix(": ")


def test_the_reference_loses_its_digest_before_its_name() -> None:
    assert fit_reference(REF, len(REF)) == REF
    assert fit_reference(REF, 100) == REF.split("@")[0] + "@sha256:0123456789ab…"
    assert fit_reference(REF, 60) == REF.split("@")[0] + "@…"
    short = fit_reference(REF, 30)
    assert len(short) == 30 and short.startswith("127.0.0.1:40123") and "…" in short
    assert short.endswith("name")


def test_a_layer_line_drops_its_state_before_its_bytes() -> None:
    assert fit_layer("0123456789ab", "Downloading", "1.0 MB/2.0 MB", 80) == (
        "  0123456789ab  Downloading  1.0 MB/2.0 MB"
    )
    assert fit_layer("0123456789ab", "Downloading", "1.0 MB/2.0 MB", 32) == (
        "  0123456789ab 1.0 MB/2.0 MB"
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _display(width: list[int]) -> tuple[_Terminal, PullDisplay]:
    term = _Terminal()
    clock = iter(float(i) for i in range(1000))
    display = PullDisplay(term, REF, tty=True, github=False, clock=lambda: next(clock),
                          columns=lambda: width[0])  # fmt: skip
    display.begin(PullPlan(image=REF))
    return term, display


def _frames(text: str) -> list[str]:
    return re.split(r"\r(?:\x1b\[\d+A)?\x1b\[J", text)


def test_a_redraw_moves_up_by_the_rows_the_frame_takes_now() -> None:
    width = [200]
    term, display = _display(width)
    for n in range(3):  # three layers and the total line: four rows at 200 columns
        display.event(PullEvent(layer=f"{n:012x}", status="Downloading", current=1, total=9))
    before = term.getvalue()
    display.event(PullEvent(layer="0" * 12, status="Downloading", current=2, total=9))
    assert "\r\x1b[3A\x1b[J" in term.getvalue()[len(before) :]
    total = display.drawn[-1]  # the total line's length as drawn at 200 columns
    assert total >= 80
    width[0] = 80  # the terminal shrank: the total line (drawn at 200) is now two rows or more
    rows_now = 3 + -(-total // 80)
    before = term.getvalue()
    display.event(PullEvent(layer="1".zfill(12), status="Downloading", current=3, total=9))
    assert f"\r\x1b[{rows_now - 1}A\x1b[J" in term.getvalue()[len(before) :]
    assert all(len(line) < 80 for line in _frames(term.getvalue()[len(before) :])[-1].split("\n"))


def test_every_line_written_on_a_terminal_fits_it() -> None:
    width = [80]
    term, display = _display(width)
    for n in range(9):
        display.event(PullEvent(layer=f"{n:012x}", status="Waiting"))
    for line in term.getvalue().split("\n"):
        for part in _frames(line):
            assert len(part) < 80, part
