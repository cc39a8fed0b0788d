"""``rocmenv suite run`` on the real engine and the fake 8-GPU host: each test in its own
container with its own disjoint GPUs, longest first; logs, JUnit, history, SIGINT."""

from __future__ import annotations

import json
import signal
import time
import xml.etree.ElementTree as ET

from tests.support.fakegpu import fake_pod
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    inspect,
    one_engine,
    project_fixture,
    wait_for,
)
from tests.support.suite_project import Spec, check_schedule, records, write_suite

MIXED = [
    Spec(name="a4", gpus=4, est=100, sleep=2.5),
    Spec(name="b4", gpus=4, est=90, sleep=1.5),
    Spec(name="c2", gpus=2, est=80, sleep=1.0),
    Spec(name="d2", gpus=2, est=70, sleep=1.0),
    Spec(name="e1", gpus=1, est=60, sleep=0.5),
    Spec(name="f1", gpus=1, est=50, sleep=0.5, code=3),
    Spec(name="g8", gpus=8, est=30, sleep=0.5),
]


@one_engine
def test_mixed_suite_packs_disjoint_gpus_longest_first(project: Project, engine: str) -> None:
    out = write_suite(project, "mixed", MIXED)
    done = project.run(
        "suite", "run", "mixed", "--json", "--junit", "junit.xml", "--engine", engine,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # f1 exits 3
    report = json.loads(done.stdout)
    status = {t["name"]: t["status"] for t in report["tests"]}
    assert status == {s.name: ("failed" if s.code else "passed") for s in MIXED}
    assert {t["name"]: t["exit_code"] for t in report["tests"]}["f1"] == 3
    recs = records(out)
    assert sorted(recs) == sorted(s.name for s in MIXED)
    render_of = {g.index: g.render_name for g in project.host.gpus}
    check_schedule(recs, MIXED, report, render_of, 8)
    # longest expected first: the two 4-GPU tests take the pool, the 8-GPU one runs alone last
    starts = sorted(report["tests"], key=lambda t: t["started"])
    assert [t["name"] for t in starts[:2]] == ["a4", "b4"]
    g8 = recs["g8"]
    assert all(r["end"] <= g8["start"] for n, r in recs.items() if n != "g8")
    # in the container, the visible devices are its own numbering 0..k-1
    assert recs["c2"]["hip"] == "0,1"
    # logs, JUnit, history
    logs = project.cwd / "rocmenv-suite-logs" / "mixed"
    assert "recorded a4" in (logs / "a4.log").read_text()
    suite = ET.parse(project.cwd / "junit.xml").getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("7", "1")
    history = json.loads((project.root / "rocmenv.suite-history.json").read_text())
    assert "suite-test::a4" in history["tests"] and "suite-test::f1" not in history["tests"]
    assert project.containers() == []


def test_a_pool_subset_and_a_test_too_big_for_it(project: Project) -> None:
    specs = [Spec(name="x2", gpus=2, est=10, sleep=0.2), Spec(name="y1", gpus=1, est=5, sleep=0.2)]
    out = write_suite(project, "small", specs)
    done = project.run("suite", "run", "small", "--gpus", "5,7", "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    recs = records(out)
    allowed = {project.host.gpus[5].render_name, project.host.gpus[7].render_name}
    assert set(recs["x2"]["render"]) == allowed and set(recs["y1"]["render"]) <= allowed
    check_schedule(recs, specs, report, {g.index: g.render_name for g in project.host.gpus}, 2)
    big = write_suite(project, "big", [Spec(name="z8", gpus=8, est=1, sleep=0)])
    done = project.run("suite", "run", "big", "--gpus", "0-3", timeout=60)
    assert done.returncode == 2
    assert "need more GPUs than the pool of 4 has: z8 (8)" in done.stderr
    assert not (big / "z8.json").exists() and project.containers() == []


def test_on_an_arc_runner_pod_the_suite_runs_on_exactly_the_pods_gpus(project: Project) -> None:
    """Issue 30, item 5: sysfs shows eight GPUs, the pod's /dev holds two, and its podinfo
    file names them as ``--device`` flags; every test's container gets only those (before,
    the suite scheduled onto GPU 0: "device … does not exist on this host")."""
    pod = fake_pod(project.host, (2, 5))
    specs = [Spec(name="pair", gpus=2, est=30, sleep=0.3)] + [
        Spec(name=f"one{i}", gpus=1, est=20 - i, sleep=0.3) for i in range(3)
    ]
    out = write_suite(project, "pod", specs)
    done = project.run("suite", "run", "pod", "--json", env=pod.env(), timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {t["name"]: t["status"] for t in report["tests"]} == {s.name: "passed" for s in specs}
    assert {g for t in report["tests"] for g in t["assigned"]} == {2, 5}
    recs = records(out)
    assert set(recs["pair"]["render"]) == pod.render_names  # the devices each container got
    assert all(len(recs[f"one{i}"]["render"]) == 1 for i in range(3))
    assert set().union(*(recs[s.name]["render"] for s in specs)) == pod.render_names
    check_schedule(recs, specs, report, {g.index: g.render_name for g in project.host.gpus}, 2)
    assert project.containers() == []


def _running(project: Project) -> int:
    """How many of the project's containers run (the state a test needs, polled)."""
    running = 0
    for container in project.containers():
        try:
            running += bool(inspect(container)["State"]["Running"])  # type: ignore[index]
        except RuntimeError:  # gone meanwhile
            continue
    return running


def test_sigint_stops_every_tests_container_and_leaves_none(project: Project) -> None:
    specs = [Spec(name=f"s{i}", gpus=2, est=100 - i, sleep=300) for i in range(6)]
    write_suite(project, "slow", specs)
    proc = project.popen("suite", "run", "slow", "--json")
    try:
        assert wait_for(lambda: _running(project) == 4, 60), "4 tests never ran"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # the tests sleep 300 s: only a hang is slower
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    report = json.loads(out)
    status = sorted(t["status"] for t in report["tests"])
    assert status == ["cancelled"] * 4 + ["skipped"] * 2
    assert report["interrupted"] is True
    assert project.containers() == []


def test_a_partition_runs_only_its_share_of_the_plan(project: Project) -> None:
    specs = [Spec(name=f"p{i}", gpus=1, est=100 - 10 * i, sleep=0.1) for i in range(5)]
    out = write_suite(project, "parts", specs)
    plan = project.run("suite", "plan", "parts", "--partitions", "2", "--json")
    assert plan.returncode == 0, plan.stderr
    second = [t["name"] for t in json.loads(plan.stdout)["partitions"][1]["tests"]]
    # 100, 90, 80, 70, 60: longest-first gives 230/170; the balanced split 210/190
    assert second == ["p0", "p1"]
    done = project.run("suite", "run", "parts", "--partition", "1/2", "--gpus", "0", "--json")
    assert done.returncode == 0, done.stderr
    assert sorted(records(out)) == second
    report = json.loads(done.stdout)
    assert [t["name"] for t in sorted(report["tests"], key=lambda t: t["started"])] == second


def test_fail_fast_stops_the_running_tests_and_skips_the_rest(
    project: Project, engine: str
) -> None:
    specs = [
        Spec(name="long", gpus=4, est=100, sleep=300),
        Spec(name="bad", gpus=4, est=90, sleep=0.5, code=2),
        Spec(name="later", gpus=8, est=10, sleep=0.1),
    ]
    out = write_suite(project, "ff", specs)
    t0 = time.monotonic()
    done = project.run("suite", "run", "ff", "--fail-fast", "--json", "--engine", engine)
    assert time.monotonic() - t0 < 60
    assert done.returncode == 1, done.stderr
    status = {t["name"]: t["status"] for t in json.loads(done.stdout)["tests"]}
    assert status == {"long": "cancelled", "bad": "failed", "later": "skipped"}
    assert sorted(records(out)) == ["bad"]
    assert project.containers() == []
