"""``rocmenv gc``'s verdicts (rocmenv.engine.gc) against the in-memory engine, the owner's
process answered by a patched ``os.kill`` and ``process_start``: a container is removed only
when its owner ran on this host and is gone, never when its owner is alive, also when the
owner is another user's process that this one may not signal (EPERM). The same against the
real engine and real processes: tests/integration/engine/test_gc.py."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable

import pytest

from rocmenv.container.labels import LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_OWNER_START
from rocmenv.container.runspec import RunSpec
from rocmenv.engine import gc
from rocmenv.engine.gc import collect_garbage, find_leftovers
from rocmenv.engine.protocol import ImageInfo
from rocmenv.errors import EngineError
from tests.support.fake_engine import FakeEngine

IMAGE = "rocmenv-gc-test:1"
HERE = socket.gethostname()
START = "b00tb00t:4242"  # the owner's recorded start (boot id prefix : clock ticks)


class Processes:
    """What ``os.kill(pid, 0)`` and ``process_start(pid)`` answer, per pid: "gone" (ESRCH),
    "foreign" (EPERM: alive, another user's), "mine" (alive, signallable)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.state: dict[int, str] = {}
        self.started: dict[int, str | None] = {}
        self.probed: list[tuple[int, int]] = []
        monkeypatch.setattr("rocmenv.engine.gc.os.kill", self.kill)
        monkeypatch.setattr(gc, "process_start", lambda pid: self.started.get(pid))

    def kill(self, pid: int, sig: int) -> None:
        self.probed.append((pid, sig))
        state = self.state.get(pid, "gone")
        if state == "gone":
            raise ProcessLookupError(errno.ESRCH, "No such process")
        if state == "foreign":
            raise PermissionError(errno.EPERM, "Operation not permitted")

    def alive(self, pid: int, how: str = "mine", start: str | None = START) -> None:
        self.state[pid], self.started[pid] = how, start


@pytest.fixture
def procs(monkeypatch: pytest.MonkeyPatch) -> Processes:
    return Processes(monkeypatch)


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(images={IMAGE: ImageInfo(id="sha256:" + "1" * 64)})


def container(engine: FakeEngine, **labels: str) -> str:
    return engine.create(RunSpec(image=IMAGE, labels=tuple(labels.items())))


def owned(engine: FakeEngine, pid: int | str, host: str = HERE, start: str | None = START) -> str:
    labels = {LABEL_OWNER_PID: str(pid), LABEL_OWNER_HOST: host}
    if start is not None:
        labels[LABEL_OWNER_START] = start
    return container(engine, **labels)


def verdicts(engine: FakeEngine) -> dict[str, str]:
    return {item.id: item.verdict for item in find_leftovers(engine)}


def test_a_container_whose_owner_is_gone_is_removed(engine: FakeEngine, procs: Processes) -> None:
    orphan = owned(engine, 101)
    done = collect_garbage(engine, dry_run=False)
    assert [(i.id, i.verdict, i.owner_pid) for i in done] == [(orphan, "remove", 101)]
    assert engine.removed == [orphan] and engine.alive == set()
    assert all(sig == 0 for _, sig in procs.probed)  # only ever probed, never signalled


def test_an_owner_this_user_may_not_signal_is_alive_and_its_container_kept(
    engine: FakeEngine, procs: Processes
) -> None:
    """EPERM is "exists, another user's": never "gone" (every test as root never sees it)."""
    procs.alive(202, "foreign")
    theirs = owned(engine, 202)
    assert verdicts(engine) == {theirs: "keep"}
    done = collect_garbage(engine, dry_run=False)
    assert [i.verdict for i in done] == ["keep"]
    assert engine.removed == [] and engine.alive == {theirs}


def test_an_owner_another_user_runs_whose_start_cannot_be_read_is_kept(
    engine: FakeEngine, procs: Processes
) -> None:
    procs.alive(203, "foreign", start=None)  # /proc/<pid>/stat unreadable (hidepid)
    theirs = owned(engine, 203)
    assert collect_garbage(engine, dry_run=False)[0].verdict == "keep"
    assert engine.alive == {theirs}


def test_a_pid_another_user_reused_is_not_the_owner(engine: FakeEngine, procs: Processes) -> None:
    procs.alive(204, "foreign", start="b00tb00t:9999")  # EPERM, but a later process
    orphan = owned(engine, 204)
    assert collect_garbage(engine, dry_run=False)[0].verdict == "remove"
    assert engine.removed == [orphan]


@pytest.mark.parametrize(
    ("recorded", "current", "verdict"),
    [
        (START, START, "keep"),  # the owner itself
        (START, "b00tb00t:9999", "remove"),  # the pid now belongs to another process
        (START, "0therb00t:4242", "remove"),  # the same ticks after a reboot
        (None, "b00tb00t:9999", "keep"),  # no start recorded: a live pid is the owner
        (START, None, "keep"),  # its start unreadable: alive is alive
    ],
)
def test_a_live_pid_is_the_owner_only_when_its_start_matches(
    engine: FakeEngine, procs: Processes, recorded: str | None, current: str | None, verdict: str
) -> None:
    procs.alive(305, "mine", start=current)
    box = owned(engine, 305, start=recorded)
    assert collect_garbage(engine, dry_run=False)[0].verdict == verdict
    assert (box in engine.removed) == (verdict == "remove")


@pytest.mark.parametrize("host", ["another-host", ""])
def test_a_container_owned_on_another_or_unknown_host_is_kept(
    engine: FakeEngine, procs: Processes, host: str
) -> None:
    box = owned(engine, 406, host=host)  # pid 406 is gone here: not the same pid there
    (item,) = collect_garbage(engine, dry_run=False)
    assert (item.verdict, item.owner_host) == ("keep", host)
    assert engine.alive == {box}
    assert procs.probed == []  # another host's pid is never probed here


@pytest.mark.parametrize("pid", ["", "abc", "12x"])
def test_a_container_without_a_readable_owner_pid_is_kept(
    engine: FakeEngine, procs: Processes, pid: str
) -> None:
    box = owned(engine, pid)
    (item,) = collect_garbage(engine, dry_run=False)
    assert (item.verdict, item.owner_pid) == ("keep", None)
    assert engine.alive == {box} and procs.probed == []


def test_containers_rocmenv_did_not_make_are_not_even_listed(
    engine: FakeEngine, procs: Processes
) -> None:
    foreign = container(engine, **{"org.example": "x", LABEL_OWNER_HOST: HERE})
    assert collect_garbage(engine, dry_run=False) == []
    assert engine.alive == {foreign}


def test_a_dry_run_judges_every_container_and_removes_none(
    engine: FakeEngine, procs: Processes
) -> None:
    procs.alive(508, "mine")
    procs.alive(509, "foreign")
    dead, live, theirs = owned(engine, 507), owned(engine, 508), owned(engine, 509)
    done = collect_garbage(engine, dry_run=True)
    assert {i.id: i.verdict for i in done} == {dead: "remove", live: "keep", theirs: "keep"}
    assert engine.removed == [] and engine.alive == {dead, live, theirs}


def test_the_verdict_is_checked_again_just_before_the_removal(
    engine: FakeEngine, procs: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the listing and the removal the labels are read anew: a container whose
    owner now answers (or whose labels changed) is kept."""
    box = owned(engine, 610)
    judged = find_leftovers(engine)
    assert [i.verdict for i in judged] == ["remove"]
    monkeypatch.setattr(gc, "find_leftovers", lambda _engine: judged)
    procs.alive(610, "foreign")  # the owner is seen again (its pid answered EPERM)
    (item,) = collect_garbage(engine, dry_run=False)
    assert item.verdict == "keep" and item.reason and item.reason != judged[0].reason
    assert engine.removed == [] and engine.alive == {box}


def test_the_recheck_reads_the_labels_as_they_are_now(
    engine: FakeEngine, procs: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = owned(engine, 611)
    judged = find_leftovers(engine)
    monkeypatch.setattr(gc, "find_leftovers", lambda _engine: judged)
    real_inspect: Callable[[str], dict[str, object]] = engine.inspect_container

    def moved(cid: str) -> dict[str, object]:
        doc = real_inspect(cid)
        doc["Config"] = {"Labels": {LABEL_OWNER_PID: "611", LABEL_OWNER_HOST: "another-host"}}
        return doc

    monkeypatch.setattr(engine, "inspect_container", moved)
    assert collect_garbage(engine, dry_run=False)[0].verdict == "keep"
    assert engine.alive == {box}


def test_a_container_gone_before_its_removal_is_left_out_quietly(
    engine: FakeEngine, procs: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone, other = owned(engine, 712), owned(engine, 713)

    def inspect(cid: str) -> dict[str, object]:
        if cid == gone:
            raise EngineError(f"No such container: {cid}")
        return FakeEngine.inspect_container(engine, cid)

    monkeypatch.setattr(engine, "inspect_container", inspect)
    done = collect_garbage(engine, dry_run=False)
    assert [i.id for i in done] == [other]
    assert engine.removed == [other]


def test_every_leftover_says_what_it_is(engine: FakeEngine, procs: Processes) -> None:
    box = container(
        engine,
        **{LABEL_OWNER_PID: "814", LABEL_OWNER_HOST: HERE, "rocmenv.profile": "ci"},
    )
    (item,) = find_leftovers(engine)
    doc = item.to_json()
    assert doc == {
        "id": box, "kind": "container", "name": "", "state": "created", "profile": "ci",
        "owner_pid": 814, "owner_host": HERE, "verdict": "remove", "reason": item.reason,
    }  # fmt: skip
    assert item.reason  # a reason is always given


def test_labels_a_container_lacks_are_reported_empty(engine: FakeEngine, procs: Processes) -> None:
    box = container(engine, **{LABEL_OWNER_PID: "915"})  # no host, no profile, no start
    (item,) = find_leftovers(engine)
    assert (item.verdict, item.owner_host, item.profile) == ("keep", "", "")
    assert engine.alive == {box} and procs.probed == []


def test_each_kind_of_verdict_has_its_own_reason(
    engine: FakeEngine, procs: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user reads in ``gc``'s report: the reason differs by cause (no wording is
    asserted), and a kept container keeps the reason found on the recheck."""
    procs.alive(1002, "mine")
    procs.alive(1003, "mine", start="b00tb00t:1")
    owned(engine, "x"), owned(engine, 1001, host=""), owned(engine, 1001, host="h2")
    owned(engine, 1001), owned(engine, 1002), owned(engine, 1003)
    reasons = [i.reason for i in find_leftovers(engine)]
    assert len(set(reasons)) == len(reasons)  # six causes, six reasons
    assert all(reasons)


def test_a_recheck_without_an_owner_pid_label_keeps_the_container(
    engine: FakeEngine, procs: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = owned(engine, 1101)
    judged = find_leftovers(engine)
    monkeypatch.setattr(gc, "find_leftovers", lambda _engine: judged)
    monkeypatch.setattr(engine, "inspect_container", lambda cid: {"Config": {"Labels": {}}})
    (item,) = collect_garbage(engine, dry_run=False)
    assert item.verdict == "keep" and item.reason and item.reason != judged[0].reason
    assert engine.alive == {box}


def test_the_removal_is_forced(
    engine: FakeEngine, procs: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leftover may still be running (its owner was killed): only a forced removal ends it."""
    owned(engine, 1201)
    asked: list[object] = []
    monkeypatch.setattr(engine, "remove", lambda cid, **kw: asked.append(kw.get("force")))
    collect_garbage(engine, dry_run=False)
    assert asked == [True]
