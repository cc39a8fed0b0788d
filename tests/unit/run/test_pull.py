"""Pure logic of pulls: failure classes, progress arithmetic, the plain-log rate, gc plans."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import pytest

from rocmenv.context import Context
from rocmenv.engine.protocol import LocalImage, PullEvent
from rocmenv.errors import ConfigError, UsageError
from rocmenv.run.images import Pulled, load_pulled, parse_duration, plan_image_gc, record_pull
from rocmenv.run.progress import PullDisplay
from rocmenv.run.pull import Failure, LayerPlan, PullPlan, PullProgress, classify
from rocmenv.settings.keys import parse_size


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("toomanyrequests: You have reached your pull rate limit", "rate-limit"),
        ("received unexpected HTTP status: 429 Too Many Requests", "rate-limit"),
        ("received unexpected HTTP status: 503 Service Unavailable", "server"),
        ("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer", "connection"),
        ("unexpected EOF", "connection"),
        ("manifest unknown: manifest unknown", "fatal"),
        ("pull access denied for x, repository does not exist", "fatal"),
    ],
)
def test_failures_are_classified_for_retrying(message: str, kind: str) -> None:
    assert classify(message).kind == kind


def _plan() -> PullPlan:
    return PullPlan(
        image="img:1",
        layers=(
            LayerPlan(digest="sha256:" + "a" * 64, size=600, present=False),
            LayerPlan(digest="sha256:" + "b" * 64, size=400, present=False),
            LayerPlan(digest="sha256:" + "c" * 64, size=999, present=True),
        ),
    )


def test_progress_counts_only_missing_layers_and_completions() -> None:
    now = [0.0]
    progress = PullProgress(plan=_plan(), clock=lambda: now[0])
    assert (progress.done, progress.total) == (0, 1000)
    now[0] = 2.0
    progress.feed(PullEvent(layer="a" * 12, status="Downloading", current=300, total=600))
    assert (
        progress.done == 300 and progress.rate == 150 and progress.eta == pytest.approx(700 / 150)
    )
    progress.feed(PullEvent(layer="b" * 12, status="Pull complete"))  # docker-cli: no bytes
    progress.feed(PullEvent(layer="c" * 12, status="Already exists"))
    progress.feed(PullEvent(layer="t1", status="Pulling from repo"))  # the tag, not a layer
    assert (progress.done, progress.total) == (700, 1000)


def test_plain_lines_come_at_each_tenth_and_at_most_every_interval() -> None:
    now = [0.0]
    out = io.StringIO()
    display = PullDisplay(out, "img:1", tty=False, github=False, clock=lambda: now[0])
    display.begin(
        PullPlan(
            image="img:1",
            layers=(LayerPlan(digest="sha256:" + "a" * 64, size=1000, present=False),),
        )
    )
    layer = "a" * 12
    for done in range(0, 1001, 10):  # 101 events, 0.1 s apart
        now[0] += 0.1
        display.event(PullEvent(layer=layer, status="Downloading", current=done, total=1000))
    lines = out.getvalue().splitlines()[1:]
    assert len(lines) == 10  # 10 %, 20 %, … 100 %: one each
    out.truncate(0)
    out.seek(0)
    display.last_decile = 10
    for _ in range(1, 61):  # a minute without progress: a line every 15 s
        now[0] += 1
        display.event(PullEvent(layer=layer, status="Downloading", current=1000, total=1000))
    assert len(out.getvalue().splitlines()) == 4


def test_github_group_is_closed_even_when_the_pull_fails() -> None:
    out = io.StringIO()
    display = PullDisplay(out, "img:1", tty=False, github=True)
    display.begin(PullPlan(image="img:1"))
    display.retrying(1, Failure(kind="server", message="503"), 2.0)
    display.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "::group::rocmenv: pulling img:1" and lines[-1] == "::endgroup::"
    assert "pull attempt 1 of img:1 failed (registry server error): 503; retrying in 2s" in lines[1]


def _image(name: str, size: int, digest: str | None = None) -> LocalImage:
    digests = (f"r/{name}@sha256:{digest}",) if digest else ()
    return LocalImage(
        id=f"sha256:{name}", repo_tags=(f"r:{name}",), repo_digests=digests, size=size
    )


def test_gc_plan_removes_oldest_first_until_under_max_disk() -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    images = [_image(n, 100) for n in ("a", "b", "c", "d")] + [_image("x", 100)]
    pulled = {
        f"sha256:{n}": Pulled(
            image_id=f"sha256:{n}", refs=(n,), pulled_at=t0 + dt.timedelta(days=i)
        )
        for i, n in enumerate(("c", "a", "d", "b"))
    }
    verdicts = plan_image_gc(
        images, pulled, locked_digests=set(), in_use=set(), now=t0 + dt.timedelta(days=9),
        max_disk=300,
    )  # fmt: skip
    removed = [v.image.id for v in verdicts if v.verdict == "remove"]
    assert removed == ["sha256:c", "sha256:a"]  # 500 → 300: the two oldest pulls
    reasons = {v.image.id: v.reason for v in verdicts if v.verdict == "keep"}
    assert reasons["sha256:x"] == "not pulled by rocmenv"
    young = plan_image_gc(
        images, pulled, locked_digests=set(), in_use={"sha256:d"},
        now=t0 + dt.timedelta(days=3, hours=12), older_than=dt.timedelta(days=1),
    )  # fmt: skip
    assert [v.image.id for v in young if v.verdict == "remove"] == ["sha256:c", "sha256:a"]
    assert {v.image.id: v.reason for v in young}["sha256:d"] == "used by a container"


def test_image_record_is_atomic_versioned_and_strict(tmp_path: Path) -> None:
    ctx = Context(env={"XDG_DATA_HOME": str(tmp_path)})
    when = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    record_pull(ctx, "sha256:1", "r:a", when)
    record_pull(ctx, "sha256:1", "r:b", when)
    assert load_pulled(ctx)["sha256:1"].refs == ("r:a", "r:b")
    path = tmp_path / "rocmenv" / "images.json"
    assert json.loads(path.read_text())["state_version"] == 1
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    path.write_text(json.dumps({"state_version": 99, "images": {}}))
    with pytest.raises(ConfigError, match="state_version 99"):
        load_pulled(ctx)


def test_sizes_and_durations() -> None:
    assert parse_size("2g") == 2 << 30 and parse_size("500MB") == 500 << 20
    assert parse_size("0") == 0 and parse_size("1.5t") == int(1.5 * (1 << 40))
    assert parse_duration("7d") == dt.timedelta(days=7)
    with pytest.raises(UsageError):
        parse_size("lots")
    with pytest.raises(UsageError):
        parse_duration("soon")


def test_a_silent_engine_still_gets_a_line_every_interval_off_a_terminal() -> None:
    import time

    out = io.StringIO()
    display = PullDisplay(out, "img:1", tty=False, github=False, interval=0.05, ticker=True)
    display.begin(
        PullPlan(
            image="img:1",
            layers=(LayerPlan(digest="sha256:" + "a" * 64, size=1000, present=False),),
        )
    )
    deadline = time.monotonic() + 10
    while out.getvalue().count("\n") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    display.close()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3, lines  # the first line, then lines with no event at all
    assert lines[1] == "rocmenv: pulling img:1: 0 B/1.0 kB (0%), 0 B/s, ETA ?"


def test_quiet_display_prints_only_what_failed() -> None:
    out = io.StringIO()
    display = PullDisplay(out, "img:1", tty=False, github=True, quiet=True)
    display.begin(PullPlan(image="img:1"))
    display.event(PullEvent(layer="a" * 12, status="Downloading", current=1, total=2))
    display.retrying(1, Failure(kind="connection", message="EOF"), 1.0)
    display.close()
    assert out.getvalue() == (
        "rocmenv: pull attempt 1 of img:1 failed (connection failed): EOF; "
        "retrying in 1s (finished layers are kept)\n"
    )


def test_the_registry_rate_limit_state_is_said_when_the_registry_sends_it() -> None:
    from rocmenv.run.pull import rate_limits

    class Client:
        def ratelimits(self) -> list[dict[str, object]]:
            return [
                {"host": "registry-1.docker.io", "limit": 100, "remaining": 7, "window": 21600},
                {"host": "127.0.0.1:5000", "limit": None, "remaining": None, "window": None},
            ]

    assert rate_limits(Client()) == [  # type: ignore[arg-type]
        "registry rate limit on registry-1.docker.io: 7 of 100 pulls left per 6h00m"
    ]


def test_podman_pull_lines_become_layer_events() -> None:
    from rocmenv.engine.podman import podman_events

    seen = [
        "Trying to pull r/x:1...",
        "Copying blob sha256:" + "a" * 64,
        "Copying blob sha256:" + "b" * 64,
    ]
    assert podman_events(seen[1], seen[:2]) == [PullEvent(layer="a" * 12, status="Downloading")]
    done = podman_events("Copying config sha256:" + "c" * 64, seen)
    assert [(e.layer, e.status) for e in done] == [
        ("a" * 12, "Pull complete"),
        ("b" * 12, "Pull complete"),
    ]
    assert podman_events("Storing signatures", seen) == []
