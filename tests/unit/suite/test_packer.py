"""The GPU-slot packer: disjoint sets, longest first, no over-commit; cancellation."""

from __future__ import annotations

import random
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest

from rocmenv.errors import UsageError
from rocmenv.suite.drive import Cancel, Outcome, RunOptions, SuiteEvent, TestResult, run_packed
from rocmenv.suite.junit import junit_xml
from rocmenv.suite.packer import Job, Packer, lower_bound, simulate
from rocmenv.suite.report import SuiteReport, markdown, table


def _mixed(seed: int) -> tuple[list[Job], dict[str, float]]:
    rng = random.Random(seed)
    jobs, real = [], {}
    for i in range(16):
        est = rng.uniform(100, 1600)
        jobs.append(Job(name=f"t{i:02d}", gpus=rng.choice([1, 2, 4, 8]), estimate=est))
        real[f"t{i:02d}"] = est * rng.uniform(0.7, 1.3)
    return jobs, real


@pytest.mark.parametrize("seed", range(20))
def test_simulated_schedules_never_share_or_overcommit_gpus(seed: int) -> None:
    jobs, real = _mixed(seed)
    slots = simulate(jobs, real, 8)
    assert sorted(s.name for s in slots) == sorted(j.name for j in jobs)
    need = {j.name: j.gpus for j in jobs}
    for s in slots:
        assert len(s.gpus) == need[s.name] and set(s.gpus) <= set(range(8))
    for a, b in combinations(slots, 2):
        if a.start < b.end and b.start < a.end:  # overlapping in time
            assert not set(a.gpus) & set(b.gpus), (a, b)
    for s in slots:  # at every start, the running tests fit in the pool
        busy = sum(len(o.gpus) for o in slots if o.start <= s.start < o.end)
        assert busy <= 8
    makespan = max(s.end for s in slots)
    assert makespan >= lower_bound(jobs, real, 8) - 1e-9


def test_longest_expected_first_and_backfill_when_the_head_does_not_fit() -> None:
    jobs = [
        Job(name="long4", gpus=4, estimate=100),
        Job(name="eight", gpus=8, estimate=90),
        Job(name="short4", gpus=4, estimate=10),
    ]
    packer = Packer(jobs, range(8))
    first = packer.take()
    assert [(j.name, g) for j, g in first] == [("long4", (0, 1, 2, 3)), ("short4", (4, 5, 6, 7))]
    packer.release("short4")
    assert packer.take() == []  # eight waits for the whole pool
    packer.release("long4")
    assert [(j.name, g) for j, g in packer.take()] == [("eight", tuple(range(8)))]


def test_a_test_bigger_than_the_pool_is_refused_before_anything_starts() -> None:
    with pytest.raises(UsageError, match=r"need more GPUs than the pool of 4 has: big \(8\)"):
        Packer(
            [Job(name="big", gpus=8, estimate=1), Job(name="ok", gpus=1, estimate=1)], [0, 1, 2, 3]
        )


def test_max_parallel_limits_concurrency() -> None:
    jobs = [Job(name=f"t{i}", gpus=1, estimate=10) for i in range(6)]
    slots = simulate(jobs, {j.name: 10.0 for j in jobs}, 8, max_parallel=2)
    assert max(s.end for s in slots) == 30.0


def test_all_four_gpu_reference_shape_beats_the_static_split() -> None:
    est = [1600, 1500, 1400, 1300, 1100, 1000, 800, 600]
    jobs = [Job(name=f"t{i}", gpus=4, estimate=e) for i, e in enumerate(est)]
    real = {
        f"t{i}": e * f
        for i, (e, f) in enumerate(zip(est, [0.7, 1.3, 1.0, 0.8, 1.2, 0.9, 1.3, 0.7], strict=True))
    }
    dynamic = max(s.end for s in simulate(jobs, real, 8))
    static = max(sum(real[f"t{i}"] for i in part) for part in ([0, 3, 4, 7], [1, 2, 5, 6]))
    assert dynamic <= static


def _run(jobs: list[Job], pool: list[int], launch, **kw):
    events: list[SuiteEvent] = []
    stop = kw.pop("stop", threading.Event())
    results = run_packed(jobs, pool, launch, stop, RunOptions(on_event=events.append, **kw))
    return results, events


def test_real_threads_start_the_next_test_as_soon_as_gpus_free() -> None:
    seen: dict[str, tuple[float, float, tuple[int, ...]]] = {}
    lock = threading.Lock()

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        t0 = time.monotonic()
        time.sleep(job.estimate)
        with lock:
            seen[job.name] = (t0, time.monotonic(), gpus)
        return Outcome(
            status="passed" if job.name != "c" else "failed", exit_code=0 if job.name != "c" else 3
        )

    jobs = [Job(name="a", gpus=2, estimate=0.6), Job(name="b", gpus=2, estimate=0.2),
            Job(name="c", gpus=1, estimate=0.3), Job(name="d", gpus=2, estimate=0.1)]  # fmt: skip
    results, events = _run(jobs, [5, 6, 7], launch)
    assert [e.name for e in events if e.kind == "start"][:2] == ["a", "c"]
    # b (2 GPUs) cannot start when c frees one GPU, only when a frees two: right then (the
    # next thing the packer does; a clock would measure the machine's speed, not this)
    order = [(e.kind, e.name) for e in events if e.kind in ("start", "end")]
    assert order[order.index(("end", "a")) + 1] == ("start", "b"), order
    assert seen["b"][0] >= seen["a"][1]
    for x, y in combinations(seen, 2):
        (s1, e1, g1), (s2, e2, g2) = seen[x], seen[y]
        if s1 < e2 and s2 < e1:
            assert not set(g1) & set(g2)
    by = {r.name: r for r in results}
    assert by["c"].status == "failed" and by["c"].exit_code == 3
    assert all(set(r.assigned) <= {5, 6, 7} for r in results)


def test_fail_fast_cancels_running_tests_and_skips_the_rest() -> None:
    stopped: list[str] = []

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        if job.name == "fails":
            time.sleep(0.1)
            return Outcome(status="failed", exit_code=1)
        gone = threading.Event()

        def on_cancel() -> None:
            stopped.append(job.name)
            gone.set()

        cancel.on_cancel(on_cancel)
        gone.wait(120)  # not cancelled: the run takes this long
        return Outcome(status="failed", exit_code=137)

    jobs = [Job(name="long", gpus=1, estimate=100), Job(name="fails", gpus=1, estimate=50),
            Job(name="later", gpus=2, estimate=10)]  # fmt: skip
    t0 = time.monotonic()
    results, _ = _run(jobs, [0, 1], launch, fail_fast=True)
    assert time.monotonic() - t0 < 60  # a ceiling: the missing cancel above, not the speed
    by = {r.name: r.status for r in results}
    assert by == {"fails": "failed", "long": "cancelled", "later": "skipped"}
    assert stopped == ["long"]


def test_stop_event_cancels_everything() -> None:
    stop = threading.Event()

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        gone = threading.Event()
        cancel.on_cancel(gone.set)
        stop.set()
        gone.wait(10)
        return Outcome(status="failed", exit_code=130)

    results, _ = _run(
        [Job(name="a", gpus=1, estimate=1), Job(name="b", gpus=1, estimate=1)],
        [0],
        launch,
        stop=stop,
    )
    assert {r.name: r.status for r in results} == {"a": "cancelled", "b": "skipped"}


def test_an_exception_in_one_launch_is_that_tests_error() -> None:
    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        if job.name == "bad":
            raise RuntimeError("boom")
        return Outcome(status="passed", exit_code=0)

    results, _ = _run(
        [Job(name="bad", gpus=0, estimate=1), Job(name="ok", gpus=0, estimate=1)], [], launch
    )
    by = {r.name: r for r in results}
    assert by["bad"].status == "error" and "boom" in by["bad"].message
    assert by["ok"].status == "passed"


def test_junit_markdown_and_table(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_text("line 1\nTraceback: assertion <failed> & more\n")
    results = (
        TestResult(name="a.py", gpus=4, assigned=(0, 1, 2, 3), status="passed", exit_code=0, started=1.0, wall=12.5, estimate=10),
        TestResult(name="b.py", gpus=1, assigned=(4,), status="failed", exit_code=2, started=2.0, wall=3.0, estimate=5, log=str(log)),
        TestResult(name="c.py", gpus=2, status="skipped", estimate=1),
    )  # fmt: skip
    report = SuiteReport(
        suite="s", backend="local", results=results, makespan=13.0, pool=tuple(range(8))
    )
    root = ET.fromstring(junit_xml(report))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    failure = cases["b.py"].find("failure")
    assert failure is not None and failure.get("message") == "exit code 2"
    assert "assertion <failed> & more" in (failure.text or "")
    assert cases["c.py"].find("skipped") is not None
    md = markdown(report)
    assert "| `b.py` | 1 | 4 | 3.0 s | 5 s | 2 | FAIL |" in md
    lines = table(report)
    assert lines[0].split() == ["TEST", "GPUS", "ON", "WALL", "ESTIMATE", "EXIT", "RESULT"]
    assert lines[1].split() == ["a.py", "4", "0,1,2,3", "12.5s", "10s", "0", "ok"]
    assert lines[-1] == "suite s: 1 passed, 1 failed, 1 skipped in 13.0s on 8 GPU(s)"
    assert not report.passed


@pytest.mark.parametrize(("gpus", "pool"), [(4, 8), (2, 8), (1, 8), (2, 6), (4, 12)])
def test_uniform_suites_are_never_slower_than_the_static_split(gpus: int, pool: int) -> None:
    """Lanes + stealing: for every draw of actual times, the makespan is at most that of
    `suite plan --partitions pool/gpus` with each partition running its tests in turn."""
    from rocmenv.suite.history import History
    from rocmenv.suite.model import Suite, SuiteTest
    from rocmenv.suite.plan import estimates, partitions

    k = pool // gpus
    for seed in range(200):
        rng = random.Random(seed)
        n = rng.randint(1, 14)
        jobs = [Job(name=f"t{i:02d}", gpus=gpus, estimate=rng.uniform(60, 1800)) for i in range(n)]
        real = {j.name: j.estimate * rng.uniform(0.5, 1.5) for j in jobs}
        suite = Suite(
            name="s",
            profile=None,
            tests=tuple(
                SuiteTest(name=j.name, path=j.name, gpus=gpus, est_time=j.estimate, command=())
                for j in jobs
            ),
        )
        parts = partitions(estimates(suite, History(path=Path("-")), "p"), k)
        static = max(sum(real[t.name] for t in p.tests) for p in parts)
        slots = simulate(jobs, real, pool)
        assert max(s.end for s in slots) <= static + 1e-6, seed
        for a, b in combinations(slots, 2):
            if a.start < b.end and b.start < a.end:
                assert not set(a.gpus) & set(b.gpus)


def test_the_lower_bound_is_the_gpu_time_over_the_pool_or_the_longest_test() -> None:
    a, b, cpu = (
        Job(name="a", gpus=4, estimate=1),
        Job(name="b", gpus=1, estimate=1),
        Job(name="c", gpus=0, estimate=1),
    )
    assert lower_bound([a, cpu], {"a": 10, "c": 20}, 2) == 20.0  # CPU tests use no GPU time
    assert lower_bound([a, b], {"a": 10, "b": 10}, 2) == 25.0  # (40 + 10) / 2
    assert lower_bound([b, b], {"b": 10}, 1) == 20.0
    assert lower_bound([b], {"b": 10}, 0) == 10.0  # an empty pool counts as one GPU
    assert lower_bound([], {}, 4) == 0.0


def test_tests_ending_together_free_their_gpus_together() -> None:
    """Two 1-GPU tests end at once: the 2-GPU test waiting first in line takes both, rather
    than the small one slipping in on the first GPU given back."""
    jobs = [Job(name="a", gpus=1, estimate=100), Job(name="b", gpus=1, estimate=90),
            Job(name="big", gpus=2, estimate=50), Job(name="small", gpus=1, estimate=5)]  # fmt: skip
    slots = {s.name: s for s in simulate(jobs, {"a": 10, "b": 10, "big": 20, "small": 1}, 2)}
    assert (slots["big"].start, slots["big"].gpus) == (10.0, (0, 1))
    assert slots["small"].start == 30.0


def test_a_retry_starts_before_the_tests_still_waiting() -> None:
    packer = Packer([Job(name=n, gpus=1, estimate=e) for n, e in (("a", 3), ("b", 2), ("c", 1))],
                    [0])  # fmt: skip
    ((a, gpus),) = packer.take()
    packer.release("a")
    packer.requeue(replace(a, attempt=2), gpus)
    assert [(j.name, j.attempt) for j, _ in packer.take()] == [("a", 2)]


def test_a_retry_on_lanes_runs_next_on_its_own_lane() -> None:
    jobs = [Job(name=f"t{i}", gpus=4, estimate=100 - i) for i in range(6)]
    packer = Packer(jobs, range(8))
    started = {gpus: job for job, gpus in packer.take()}
    second = (4, 5, 6, 7)
    failed = started[second]
    packer.release(failed.name)
    packer.requeue(replace(failed, attempt=2), second)
    assert [(j.name, j.attempt, g) for j, g in packer.take()] == [(failed.name, 2, second)]
    # GPUs that are no lane (cannot come from the packer): the first lane's queue
    first = started[(0, 1, 2, 3)]
    packer.release(first.name)
    packer.requeue(replace(first, attempt=2), (9,))
    assert [(j.name, j.attempt, g) for j, g in packer.take()] == [(first.name, 2, (0, 1, 2, 3))]


def test_of_tests_expected_to_take_as_long_the_one_with_more_gpus_goes_first() -> None:
    jobs = [Job(name="a-one", gpus=1, estimate=10), Job(name="b-two", gpus=2, estimate=10),
            Job(name="c-one", gpus=1, estimate=10)]  # fmt: skip
    assert [j.name for j, _ in Packer(jobs, [0, 1]).take()] == ["b-two"]


def test_every_test_too_big_for_the_pool_is_named_with_what_to_do() -> None:
    with pytest.raises(UsageError) as err:
        Packer([Job(name="x", gpus=4, estimate=1), Job(name="y", gpus=3, estimate=1)], [0, 1])
    assert err.value.what == "2 test(s) need more GPUs than the pool of 2 has: x (4), y (3)"
    assert err.value.hint == "give the suite more GPUs (--gpus all), or lower those tests' gpus"


def test_a_pool_naming_a_gpu_twice_or_no_parallel_test_is_refused() -> None:
    jobs = [Job(name="t", gpus=1, estimate=1)]
    with pytest.raises(UsageError) as twice:
        Packer(jobs, [0, 3, 3])
    assert twice.value.what == "the GPU pool [0, 3, 3] names a GPU twice"
    with pytest.raises(UsageError) as none:
        Packer(jobs, [0], max_parallel=0)
    assert none.value.what == "--max-parallel 0: must be at least 1"
    assert [j.name for j, _ in Packer(jobs, [0], max_parallel=1).take()] == ["t"]


@pytest.mark.parametrize(("gpus", "pool"), [(4, 8), (2, 6)])
def test_max_parallel_as_large_as_the_lanes_keeps_the_lanes(gpus: int, pool: int) -> None:
    """--max-parallel k on k lanes limits nothing: the makespan keeps the static split's
    bound (plain list scheduling, which --max-parallel below k falls back to, can miss it)."""
    k = pool // gpus
    worse = 0
    for seed in range(200):
        rng = random.Random(seed)
        jobs = [Job(name=f"t{i:02d}", gpus=gpus, estimate=rng.uniform(60, 1800))
                for i in range(rng.randint(2, 14))]  # fmt: skip
        real = {j.name: j.estimate * rng.uniform(0.5, 1.5) for j in jobs}
        lanes = max(s.end for s in simulate(jobs, real, pool, max_parallel=k))
        unlimited = max(s.end for s in simulate(jobs, real, pool))
        worse += lanes > unlimited + 1e-6
    assert worse == 0
