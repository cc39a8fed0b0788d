"""The live pull display on a real terminal: ``rocmenv pull`` in a tmux pane, the screen read
back with ``capture-pane`` while it pulls and after (tests.support.tmux).

The image comes through a fault proxy that holds every blob back, so the display stays live
for seconds with a dozen layers; it is pulled by digest through the proxy, so its reference
(``127.0.0.1:PORT/rocmenv-test/…@sha256:<64 hex>``) is far wider than 80 columns. Every
screen seen must have at most one total line and no line the terminal had to wrap; the last
screen must hold the two log lines and nothing of the live display.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.run.test_pull import docker, push_random_image
from tests.support import testenv
from tests.support.faultproxy import Delay, FaultProxy, Match
from tests.support.tmux import Pane

HANG = 180.0  # a ceiling that only catches a hang
LAYERS = 12
LAYER_LINE = re.compile(r"^  [0-9a-f]{12} ")
TOTAL_LINE = re.compile(r", ETA \S+$")


@pytest.fixture
def slow_image(scratch_repo: str) -> Iterator[str]:
    """An image of LAYERS random layers, each blob held back 1.5 s by a proxy: its reference."""
    testenv.need_tool("tmux", hint="scripts/setup.sh installs it")
    digest, _ = push_random_image(scratch_repo, "t1", (200_000,) * LAYERS)
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        proxy.add_rule(Match(method="GET", path=r"/v2/.*/blobs/.*"), Delay(seconds=1.5))
        ref = f"{proxy.host}/{scratch_repo}@{digest}"
        yield ref
        docker("image", "rm", "--force", ref)


def _pull(tmp_path: Path, ref: str, engine: str, **env: str) -> tuple[list[str], dict[str, str]]:
    argv = ["sh", "-c", 'exec "$0" "$@" > pulled.txt', sys.executable, "-m", "rocmenv", "pull",
            "--engine", engine, ref]  # fmt: skip
    full = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), **env}  # fmt: skip
    return argv, full


def _check_live(screen: list[str], width: int) -> None:
    """What must hold at any moment: one total line at most, no line of the live display
    wider than the pane. (A note — e.g. a retried pull's error, when a loaded machine makes
    the proxy drop a connection — is a permanent line: it may wrap, and is not redrawn.)"""
    assert sum(bool(TOTAL_LINE.search(line)) for line in screen) <= 1, screen
    live = [line for line in screen if LAYER_LINE.match(line) or TOTAL_LINE.search(line)]
    assert all(len(line) <= width for line in live), [line for line in live if len(line) > width]


def _watch(pane: Pane, width: int, resize: tuple[int, int] | None = None) -> int:
    """Read the screen until the pull ends; returns how many screens showed the live display.
    ``resize``: once the display is live, the pane gets that size (checks then apply to it)."""
    live = 0
    deadline = time.monotonic() + HANG
    while pane.exit_status() is None and time.monotonic() < deadline:
        screen = pane.screen(joined=True)
        layer_lines = [line for line in screen if LAYER_LINE.match(line)]
        if layer_lines or any(TOTAL_LINE.search(line) for line in screen):
            live += 1
        if resize is not None and live:
            pane.resize(*resize)
            width, resize = resize[0], None
            continue
        if resize is None:
            _check_live([line for line in screen if not line.startswith("rocmenv: pulling 127")],
                        width)  # fmt: skip
        time.sleep(0.05)
    assert pane.exit_status() == 0, pane.text()
    return live


def _check_last(pane: Pane, width: int, ref: str) -> None:
    screen = [line for line in pane.screen(joined=True) if line]
    assert not [line for line in screen if LAYER_LINE.match(line) or TOTAL_LINE.search(line)], (
        screen  # nothing of the live display is left
    )
    assert len(screen) == 2, screen  # the header and the final line, nothing else
    header, last = screen
    assert header.startswith("rocmenv: pulling ") and f"in {LAYERS} of {LAYERS} layers)" in header
    assert re.fullmatch(r"rocmenv: pulled \S+: 2\.4 MB in \d+s \([\d.]+ [kMG]?B/s\)", last), last
    assert len(last) < width
    assert ref.split("@")[0].rsplit("/", 1)[-1][:8] in header + last or "…" in header


@pytest.mark.parametrize("engine", ["docker-api", "docker-cli"])
@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_the_live_display_fits_the_terminal_and_leaves_no_stale_line(
    tmp_path: Path, slow_image: str, engine: str, width: int, height: int
) -> None:
    argv, env = _pull(tmp_path, slow_image, engine)
    with Pane(width, height, argv, env=env, cwd=tmp_path) as pane:
        assert _watch(pane, width) > 0, "the live display was never on the screen"
        _check_last(pane, width, slow_image)
    assert (tmp_path / "pulled.txt").read_text().strip() == slow_image


def test_the_live_display_survives_a_resize_to_a_narrower_terminal(
    tmp_path: Path, slow_image: str
) -> None:
    argv, env = _pull(tmp_path, slow_image, "docker-api")
    with Pane(200, 50, argv, env=env, cwd=tmp_path) as pane:
        assert _watch(pane, 200, resize=(80, 24)) > 0
        screen = [line for line in pane.screen(joined=True) if line]
        assert not [line for line in screen if LAYER_LINE.match(line) or TOTAL_LINE.search(line)]
        assert screen[-1].startswith("rocmenv: pulled ") and len(screen[-1]) < 80, screen
        # tmux re-wraps the wide lines and keeps the cursor's row: the header (drawn at 200
        # columns) may have been pushed into the scrollback; nothing else is on the screen
        assert len(screen) == 1 or (len(screen) == 2 and screen[0].startswith("rocmenv: pull"))


def test_a_dumb_terminal_gets_the_plain_log_lines(tmp_path: Path, slow_image: str) -> None:
    argv, env = _pull(tmp_path, slow_image, "docker-api", TERM="dumb")
    with Pane(80, 24, argv, env=env, cwd=tmp_path) as pane:
        deadline = time.monotonic() + HANG
        while pane.exit_status() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pane.exit_status() == 0, pane.text()
        screen = [line for line in pane.screen(joined=True, history=True) if line]
    assert screen[0] == f"rocmenv: pulling {slow_image} (2.4 MB to download in 12 of 12 layers)"
    progress = screen[1:-1]
    assert progress and all(
        re.fullmatch(rf"rocmenv: pulling {re.escape(slow_image)}: .*, ETA \S+", line)
        for line in progress
    ), screen  # whole references, one line each: a log
    assert screen[-1].startswith(f"rocmenv: pulled {slow_image}: 2.4 MB in ")
    assert "\x1b" not in "".join(screen)
