"""Stale process reaping: precise matching on a fake /proc tree, protection of self and
ancestors, SIGTERM then SIGKILL. (The real thing runs in a container: tests/integration.)"""

from __future__ import annotations

import signal
from collections.abc import Set
from pathlib import Path

import pytest

from rocmenv.bootstrap.procs import (
    ProcInfo,
    find_stale,
    match_stale,
    protected_pids,
    read_proc,
    reap_stale,
)
from rocmenv.errors import ReapFailed


def proc(argv: list[str], comm: str | None = None, pid: int = 100) -> ProcInfo:
    return ProcInfo(
        pid=pid,
        ppid=1,
        comm=comm if comm is not None else (argv[0].rsplit("/", 1)[-1][:15] if argv else ""),
        argv=tuple(argv),
        start_time=1000 + pid,
        state="S",
    )


STALE = [
    (
        [
            "/usr/local/lib/python3.10/dist-packages/ray/core/src/ray/raylet/raylet",
            "--node_ip_address=10.0.0.1",
        ],
        None,
        "ray-daemon",
    ),
    (
        [
            "/usr/local/lib/python3.10/dist-packages/ray/core/src/ray/gcs/gcs_server",
            "--gcs_server_port=6379",
        ],
        None,
        "ray-daemon",
    ),
    (["python3", "-c", "..."], "gcs_server", "ray-daemon"),
    (["ray::IDLE"], "ray::IDLE", "ray-title"),
    (["ray::RolloutActor.generate()"], "ray::RolloutAct", "ray-title"),
    (["sleep", "1000"], "ray::IDLE", "ray-title"),
    (["sglang::scheduler_TP0"], "sglang::schedul", "sglang-title"),
    (["sglang::detokenizer"], "sglang::detoken", "sglang-title"),
    (["/usr/bin/python3", "-m", "sglang.launch_server", "--model", "x"], None, "python-module"),
    (["python", "-u", "-m", "ray.util.client.server", "--port", "1"], None, "python-module"),
    (["python3.10", "-mray.dashboard.x"], None, "python-module"),
    (["python3", "-W", "ignore", "-m", "sglang_router.launch_router"], None, "python-module"),
    (
        [
            "/opt/conda/bin/python",
            "-u",
            "/usr/local/lib/python3.10/dist-packages/ray/dashboard/dashboard.py",
            "--host=0.0.0.0",
        ],
        None,
        "python-script",
    ),
    (
        [
            "/usr/bin/python3",
            "/usr/lib/python3/dist-packages/ray/_private/log_monitor.py",
            "--logs-dir=/tmp/ray",
        ],
        None,
        "python-script",
    ),
    (["python", "/x/ray/autoscaler/_private/monitor.py"], None, "python-script"),
    (
        ["python", "/x/ray/_private/workers/default_worker.py", "--node-ip-address=1"],
        None,
        "python-script",
    ),
    (["python", "/x/ray/_private/runtime_env/agent/main.py"], None, "python-script"),
    (["python", "/x/ray/dashboard/agent.py"], None, "python-script"),
    (
        ["/usr/bin/python3", "/usr/local/bin/ray", "start", "--head", "--block"],
        None,
        "python-script",
    ),
    (
        ["/usr/bin/python3", "/usr/local/bin/sglang", "serve", "--model-path", "m"],
        None,
        "python-script",
    ),
    (
        ["python3", "/sgl-workspace/sglang/python/sglang/launch_server.py", "--port", "30000"],
        None,
        "python-script",
    ),
]

UNRELATED = [
    (["python", "my_array_test.py", "--stray"], None),
    (["vim", "ray.txt"], None),
    (["tail", "-f", "/tmp/ray/session_latest/logs/raylet.out"], None),
    (["bash", "-c", "pkill -f ray", "raylet", "ray::IDLE"], None),
    (["python3", "-m", "raytracer"], None),
    (["python3", "-m", "pytest", "tests/test_ray.py", "-k", "raylet"], None),
    (["python3", "-c", "import ray; ray.init()"], None),
    (["python3", "/tmp/ray/dashboard/notdash.py"], None),
    (["python3", "/home/me/xray/dashboard/dashboard.py"], None),
    (["python3", "/usr/local/bin/ray", "status"], None),
    (["python3", "/usr/local/bin/sglang", "version"], None),
    (["python3", "-m", "sglang.bench_serving"], None),
    (["/usr/bin/stray", "--raylet"], "stray"),
    (["graylet"], "graylet"),
    (["/usr/bin/rayletx"], "rayletx"),
    (["rocmenv", "bootstrap"], None),
    (["python3", "-W", "-m", "sglang.launch_server"], None),  # -W takes "-m" as its value
]


@pytest.mark.parametrize(("argv", "comm", "rule"), STALE)
def test_stale_ray_and_sglang_processes_match_their_rule(
    argv: list[str], comm: str | None, rule: str
) -> None:
    assert match_stale(proc(argv, comm)) == rule


@pytest.mark.parametrize(("argv", "comm"), UNRELATED)
def test_unrelated_processes_mentioning_ray_or_sglang_never_match(
    argv: list[str], comm: str | None
) -> None:
    assert match_stale(proc(argv, comm)) is None


# ------------------------------------------------------------------ a fake /proc


def write_proc(
    root: Path,
    pid: int,
    argv: list[str] | str,
    *,
    ppid: int = 1,
    comm: str | None = None,
    start: int | None = None,
    state: str = "S",
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    if isinstance(argv, str):  # a raw setproctitle()-style cmdline
        raw = argv.encode()
        name = comm or argv.strip()[:15]
    else:
        raw = b"\0".join(a.encode() for a in argv) + (b"\0" if argv else b"")
        name = comm or (argv[0].rsplit("/", 1)[-1][:15] if argv else "kthread")
    (d / "cmdline").write_bytes(raw)
    (d / "comm").write_text(name + "\n")
    fields = [state, str(ppid)] + ["0"] * 17 + [str(start if start is not None else 5000 + pid)]
    fields += ["0"] * 10
    (d / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")


class FakeSignaller:
    """Records signals; processes die on SIGTERM unless listed as stubborn (then SIGKILL)."""

    def __init__(
        self, stubborn: Set[int] = frozenset(), unkillable: Set[int] = frozenset()
    ) -> None:
        self.sent: list[tuple[int, int]] = []
        self.dead: set[int] = set()
        self.stubborn = set(stubborn)
        self.unkillable = set(unkillable)

    def send(self, p: ProcInfo, sig: int) -> bool:
        if p.pid in self.dead:
            return False
        self.sent.append((p.pid, sig))
        if p.pid in self.unkillable:
            return True
        if sig == signal.SIGKILL or p.pid not in self.stubborn:
            self.dead.add(p.pid)
        return True

    def alive(self, p: ProcInfo) -> bool:
        return p.pid not in self.dead

    def close(self) -> None:
        pass


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    write_proc(root, 1, ["/bin/sh", "-c", "ray start --head; rocmenv bootstrap"])
    write_proc(root, 2, [], comm="kthreadd", ppid=0)  # kernel thread: empty cmdline
    write_proc(root, 10, ["bash", "ci-step.sh"], ppid=1)
    write_proc(root, 11, ["ray::IDLE"], ppid=10)  # stale... but an ancestor of bootstrap
    write_proc(root, 12, ["python3", "-m", "rocmenv", "bootstrap"], ppid=11)  # "self"
    write_proc(root, 20, ["/x/ray/core/src/ray/raylet/raylet", "--a=b"], ppid=1)
    write_proc(root, 21, ["/x/ray/core/src/ray/gcs/gcs_server"], ppid=1)
    write_proc(root, 22, "ray::IDLE" + " " * 40, ppid=20)
    write_proc(root, 23, "sglang::scheduler_TP0   ", ppid=1)
    write_proc(root, 30, ["python", "my_array_test.py", "--stray"], ppid=1)
    write_proc(root, 31, ["vim", "ray.txt"], ppid=1)
    return root


def test_read_proc_parses_comm_with_spaces_and_parens(tmp_path: Path) -> None:
    write_proc(tmp_path, 7, ["x"], comm="a) (b c")
    info = read_proc(tmp_path, 7)
    assert info is not None
    assert (info.comm, info.ppid, info.start_time, info.state) == ("a) (b c", 1, 5007, "S")


def test_read_proc_strips_setproctitle_padding(proc_root: Path) -> None:
    info = read_proc(proc_root, 22)
    assert info is not None and info.argv == ("ray::IDLE",)


def test_self_ancestors_and_pid_1_are_protected(proc_root: Path) -> None:
    assert protected_pids(proc_root, 12) == {1, 10, 11, 12}


def test_find_stale_lists_exactly_the_stale_non_protected_processes(proc_root: Path) -> None:
    found, scanned = find_stale(proc_root, 12)
    assert {c.proc.pid: c.rule for c in found} == {
        20: "ray-daemon",
        21: "ray-daemon",
        22: "ray-title",
        23: "sglang-title",
    }
    assert scanned == 11


def test_reap_terms_first_and_kills_only_the_stubborn(proc_root: Path) -> None:
    sig = FakeSignaller(stubborn={21})
    result = reap_stale(
        proc_root=proc_root, self_pid=12, grace=0.2, signaller=sig, sleep=lambda s: None
    )
    assert (21, signal.SIGKILL) in sig.sent
    assert [s for p, s in sig.sent if p != 21] == [signal.SIGTERM] * 3
    by_pid = {e.pid: e for e in result.ended}
    assert by_pid[21].signal == "SIGKILL" and by_pid[20].signal == "SIGTERM"
    assert all(e.ended for e in result.ended)
    assert {p for p, _ in sig.sent} == {20, 21, 22, 23}
    assert "raylet (pid 20, SIGTERM)" in result.summary()


def test_reap_reports_a_process_that_survives_sigkill_as_a_failure(proc_root: Path) -> None:
    sig = FakeSignaller(unkillable={23})
    with pytest.raises(ReapFailed, match=r"sglang::scheduler_TP0 \(pid 23\)") as caught:
        reap_stale(proc_root=proc_root, self_pid=12, grace=0.1, kill_wait=0.1,
                   signaller=sig, sleep=lambda s: None)  # fmt: skip
    assert caught.value.exit_code == 1
    ended = {e["pid"]: e for e in caught.value.details["ended"]}
    assert ended[23]["ended"] is False and ended[20]["ended"] is True


def test_a_process_gone_before_the_signal_is_reported_without_signal(proc_root: Path) -> None:
    sig = FakeSignaller()
    sig.dead.add(20)
    result = reap_stale(proc_root=proc_root, self_pid=12, signaller=sig, sleep=lambda s: None)
    by_pid = {e.pid: e for e in result.ended}
    assert by_pid[20].signal is None and by_pid[20].ended


def test_nothing_stale_means_nothing_signalled(tmp_path: Path) -> None:
    write_proc(tmp_path, 1, ["sleep", "infinity"])
    write_proc(tmp_path, 5, ["python", "my_array_test.py", "--stray"])
    sig = FakeSignaller()
    result = reap_stale(proc_root=tmp_path, self_pid=5, signaller=sig)
    assert result.ended == () and sig.sent == []
    assert "no stale" in result.summary()
