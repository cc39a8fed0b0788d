"""The Engine protocol: what other modules use (``capture``, ``image_env``, ``image_exists``,
``pull``, ``ping``) and what run/gc use, against every real engine adapter — and against the
in-memory engine the run pipeline's unit tests use (``tests/support/fake_engine.py``), so it
cannot drift from them. Tests that need a real process, mounts or a real pull take
``real_engine``."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from rocmenv.container.runspec import BindMount, RunSpec
from rocmenv.context import Context
from rocmenv.engine.container import capture
from rocmenv.engine.protocol import Engine, ImageInfo
from rocmenv.engine.select import make_engine
from rocmenv.errors import EngineError, EngineStartError
from tests.support import hostfacts, testenv
from tests.support.fake_engine import FakeEngine

# docker-api twice: over its standard-library transport and over docker-py's
REAL_ENGINES = ("docker-api", "docker-api+docker-py", "docker-cli", "podman")
ENGINES = (*REAL_ENGINES, "fake")


def fake_engine(family: testenv.Family) -> Engine:
    """The in-memory engine, holding the test family's images as the real store does."""
    images = {
        image.ref: ImageInfo(
            id="sha256:" + hashlib.sha256(image.ref.encode()).hexdigest(),
            env=tuple(image.env.items()),
        )
        for image in family
    }
    return FakeEngine(images=images)


def made(param: str, family: testenv.Family) -> Engine:
    if param == "fake":
        return fake_engine(family)
    kind, _, transport = param.partition("+")
    if kind == "podman":
        testenv.need("podman")
    env = dict(os.environ)
    if transport:
        env["ROCMENV_DOCKER_API_TRANSPORT"] = transport
    engine = make_engine(kind, Context(env=env))  # type: ignore[arg-type]
    if kind == "docker-api":
        assert engine.transport == (transport or "stdlib")  # type: ignore[attr-defined]
    return engine


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, family: testenv.Family) -> Engine:
    return made(str(request.param), family)


@pytest.fixture(params=REAL_ENGINES)
def real_engine(request: pytest.FixtureRequest, family: testenv.Family) -> Engine:
    return made(str(request.param), family)


def _mine(engine: Engine) -> list[str]:
    return [c.id for c in engine.list_containers(labels={"rocmenv.owner-pid": str(os.getpid())})]


def test_ping_reports_the_engine(engine: Engine) -> None:
    info = engine.ping()
    assert info.version and info.name
    assert info.kind == engine.kind


def test_image_queries(engine: Engine, family: testenv.Family) -> None:
    image = family["aiter-old-pythonpath"].ref
    assert engine.image_exists(image)
    env = engine.image_env(image)
    assert env["PYTHONPATH"] == "/opt/image-site"
    info = engine.image_info(image)
    assert info is not None and info.id.startswith("sha256:")
    assert engine.image_info("127.0.0.1:5000/rocmenv-test/absent:nope") is None
    assert not engine.image_exists("127.0.0.1:5000/rocmenv-test/absent:nope")
    with pytest.raises(EngineError, match="not present"):
        engine.image_env("127.0.0.1:5000/rocmenv-test/absent:nope")


def test_capture_keeps_the_streams_apart_and_the_exit_code(
    engine: Engine, family: testenv.Family
) -> None:
    result = capture(engine, family["demo"].ref, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.timed_out
    assert _mine(engine) == []


def test_run_capture_separates_streams_and_removes_the_container(
    real_engine: Engine, family: testenv.Family, tmp_path
) -> None:
    engine = real_engine
    (tmp_path / "f.txt").write_text("mounted\n")
    result = capture(
        engine,
        family["demo"].ref,
        ["sh", "-c", 'cat /m/f.txt; echo "$GREETING"; echo oops >&2; touch /m/x || exit 4'],
        mounts=[BindMount(source=str(tmp_path), target="/m", readonly=True)],
        env={"GREETING": "hi there"},
        timeout=60,
    )
    assert result.exit_code == 4
    assert result.stdout == "mounted\nhi there\n"
    assert "oops" in result.stderr and "Read-only" in result.stderr
    assert not result.timed_out
    assert _mine(engine) == []


def test_run_capture_times_out_and_still_removes(engine: Engine, family: testenv.Family) -> None:
    result = capture(engine, family["demo"].ref, ["sleep", "60"], timeout=1.5)
    assert result.timed_out and result.exit_code == 137
    assert _mine(engine) == []


def test_run_capture_of_a_missing_command_exits_127(engine: Engine, family: testenv.Family) -> None:
    result = capture(engine, family["demo"].ref, ["no-such-command-xyz"], timeout=30)
    assert result.exit_code == 127
    assert _mine(engine) == []


@pytest.fixture
def created(engine: Engine, family: testenv.Family) -> Iterator[str]:
    from rocmenv.container.labels import Identity

    spec = RunSpec(
        image=family["demo"].ref,
        command=("sleep", "60"),
        labels=tuple(
            sorted({**Identity.current().labels(), "rocmenv.profile": "engine-test"}.items())
        ),
    )
    cid = engine.create(spec)
    yield cid
    engine.remove(cid)


def test_lifecycle_start_kill_wait_remove(engine: Engine, created: str) -> None:
    assert created in _mine(engine)
    engine.start(created)
    assert engine.inspect_container(created)["State"]["Running"]
    engine.kill(created, "SIGKILL")
    assert engine.wait(created, timeout=30) == 137
    engine.kill(created)  # not running any more: not an error
    engine.remove(created)
    engine.remove(created)  # already gone: not an error
    assert created not in _mine(engine)


def test_wait_times_out_on_a_running_container(engine: Engine, created: str) -> None:
    engine.start(created)
    with pytest.raises(EngineError, match="still running"):
        engine.wait(created, timeout=1)


def test_a_refused_start_is_explained(engine: Engine, family: testenv.Family) -> None:
    from rocmenv.container.labels import Identity
    from rocmenv.settings.profiles import Ulimit

    spec = RunSpec(
        image=family["demo"].ref,
        command=("true",),
        ulimits=(Ulimit(name="memlock", soft=-1, hard=-1),),
        labels=tuple(sorted(Identity.current().labels().items())),
    )
    cid = engine.create(spec)
    try:
        if hostfacts.ulimit_starts("memlock", -1, -1):  # a GPU runner: it starts
            engine.start(cid)
            assert engine.wait(cid, timeout=60) == 0
        else:  # a host whose hard RLIMIT_MEMLOCK root cannot raise (this sandbox)
            with pytest.raises(EngineStartError) as info:
                engine.start(cid)
            assert info.value.failure.option and "memlock" in info.value.failure.option
    finally:
        engine.remove(cid)


def test_pull_fetches_from_the_registry(
    engine: Engine, registry: testenv.OpenRegistry, family: testenv.Family
) -> None:
    repo = registry.unique_repo(f"pull-{engine.kind}")
    registry.push_manifest_copy(family["demo"].ref, repo, "t1")
    ref = registry.ref(repo, "t1")
    if isinstance(engine, FakeEngine):  # its registry is a dict: publish the same reference
        engine.registry[ref] = engine.images[family["demo"].ref]
    events: list[Any] = []
    try:
        assert not engine.image_exists(ref)
        engine.pull(ref, progress=events.append)
        assert engine.image_exists(ref)
        assert events
        with pytest.raises(EngineError, match="pulling"):
            engine.pull(registry.ref(repo, "no-such-tag"))
    finally:
        subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)


@pytest.mark.parametrize("transport", ["stdlib", "docker-py"])
def test_the_api_version_is_the_lower_of_ours_and_the_daemons(transport: str) -> None:
    from rocmenv.engine.wire import API_MAX, negotiate_version

    daemon = subprocess.run(
        ["docker", "version", "--format", "{{.Server.APIVersion}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    env = dict(os.environ)
    if transport == "docker-py":
        env["ROCMENV_DOCKER_API_TRANSPORT"] = "docker-py"
    made = make_engine("docker-api", Context(env=env))
    spoken = made.wire.api_version  # type: ignore[attr-defined]
    lower = min((daemon, API_MAX), key=lambda v: tuple(int(p) for p in v.split(".")))
    assert spoken == lower
    assert negotiate_version(daemon, where="x") == lower
    assert made.ping().api_version == daemon  # what the daemon offers is still reported


def test_volumes_are_created_listed_by_label_and_removed(engine: Engine) -> None:
    """The overlay's scratch volumes (issue 31): a data directory on the engine's host, found
    by label, removed once (and again: not an error)."""
    name = f"rocmenv-contract-{os.urandom(4).hex()}"
    labels = {"rocmenv.owner-pid": str(os.getpid()), "rocmenv.session": name}
    data = engine.create_volume(name, labels)
    try:
        assert data.startswith("/")
        found = engine.list_volumes(labels={"rocmenv.session": name})
        assert [(v.name, dict(v.labels)["rocmenv.owner-pid"]) for v in found] == [
            (name, str(os.getpid()))
        ]
        assert engine.list_volumes(labels={"rocmenv.session": name + "-other"}) == []
    finally:
        engine.remove_volume(name)
    engine.remove_volume(name)
    assert engine.list_volumes(labels={"rocmenv.session": name}) == []


def test_export_streams_a_stopped_containers_files_and_nothing_for_a_missing_path(
    real_engine: Engine, family: testenv.Family
) -> None:
    import io
    import tarfile

    from rocmenv.container.labels import Identity

    spec = RunSpec(
        image=family["demo"].ref,
        command=("sh", "-c", "mkdir -p /out/d && echo hi > /out/d/f && ln -s /etc /out/l"),
        mounts=(BindMount(source="", target="/out", kind="volume", origin="output"),),
        labels=tuple(sorted(Identity.current().labels().items())),
    )
    cid = real_engine.create(spec)
    try:
        real_engine.start(cid)
        assert real_engine.wait(cid, timeout=60) == 0
        data = b"".join(real_engine.export(cid, "/out/."))
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            found = {m.name.lstrip("./"): m.type for m in tar if m.name.lstrip("./")}
        assert found == {"d": tarfile.DIRTYPE, "d/f": tarfile.REGTYPE, "l": tarfile.SYMTYPE}
        assert b"".join(real_engine.export(cid, "/no/such/dir/.")) == b""
    finally:
        real_engine.remove(cid)


def test_a_failed_create_leaves_no_scratch_volume_of_the_overlay(
    real_engine: Engine, family: testenv.Family, tmp_path: str
) -> None:
    """Issue 31: the engine refuses the create (the name is taken) after the overlay's
    scratch volumes were made: they are removed before the error is raised."""
    from rocmenv.container.labels import Identity

    identity = Identity.current()
    labels = tuple(sorted({**identity.labels(), "rocmenv.profile": "engine-test"}.items()))
    checkout = str(tmp_path)
    view = BindMount(source=checkout, target=checkout, kind="overlay", origin="checkout")
    spec = RunSpec(image=family["demo"].ref, command=("true",), mounts=(view,), labels=labels)
    first = real_engine.create(RunSpec(image=family["demo"].ref, command=("true",),
                                       labels=labels), name=identity.container_name)  # fmt: skip
    try:
        with pytest.raises(EngineError):
            real_engine.create(spec, name=identity.container_name)
        assert real_engine.list_volumes(labels={"rocmenv.session": identity.session}) == []
    finally:
        real_engine.remove(first)


@pytest.mark.parametrize(
    ("kind", "churn"), [("docker-cli", False), ("podman", False), ("podman", True)]
)
def test_an_image_removed_between_listing_and_inspecting_is_left_out(
    kind: str, churn: bool, tmp_path: Any, family: testenv.Family
) -> None:
    """Another job on the engine removes an image after the CLI listed it and before it
    inspected it (a `docker image inspect` of several fails whole when one is gone): the
    listing leaves that one out instead of failing the command (seen in CI: `rocmenv pull`
    and `run` exiting 4 while a parallel test removed its image). ``churn``: every listing
    names an image gone by the time it is inspected (a missing id is added to each
    `image inspect` of several), so the images are inspected one by one."""
    cli = "podman" if kind == "podman" else "docker"
    if kind == "podman":
        testenv.need("podman")
    real = subprocess.run(["sh", "-c", f"command -v {cli}"], capture_output=True, text=True)
    tag = f"rocmenv-test-gone:{os.getpid()}-{os.urandom(4).hex()}"
    archive = tmp_path / "one.tar"
    (tmp_path / "marker").write_text(tag)
    subprocess.run(["tar", "-C", str(tmp_path), "-cf", str(archive), "marker"], check=True)
    gone = subprocess.run([cli, "import", str(archive), tag], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    wrapper = tmp_path / "bin" / cli
    wrapper.parent.mkdir()
    # the other job: removes the image just before a `image inspect` of several
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = image ] && [ "$2" = inspect ] && [ $# -gt 3 ]; then\n'
        f"  {real.stdout.strip()} image rm --force {tag} >/dev/null 2>&1\n"
        + (f'  set -- "$@" sha256:{"0" * 64}\n' if churn else "")
        + "fi\n"
        f'exec {real.stdout.strip()} "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{wrapper.parent}:{os.environ['PATH']}"}
    engine = make_engine(kind, Context(env=env))  # type: ignore[arg-type]
    try:
        images = engine.list_images()
    finally:
        subprocess.run([cli, "image", "rm", "--force", tag], capture_output=True, check=False)
    ids = {image.id for image in images}
    assert not any(gone.endswith(i.partition(":")[2]) for i in ids if i)
    family_id = engine.image_info(family["aiter-old-pythonpath"].ref)
    assert family_id is not None and family_id.id in ids
