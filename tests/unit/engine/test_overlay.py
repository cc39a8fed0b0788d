"""The untrusted checkout's copy-on-write view as each engine adapter renders it
(rocmenv/engine/overlay.py, podman.py), its scratch volumes' life, and ``gc`` of a killed
run's volumes; the real engines run it in tests/integration/run/test_checkout_view.py."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from rocmenv.container.labels import Identity, run_labels
from rocmenv.container.render import create_body, render_docker
from rocmenv.container.runspec import BindMount, RunSpec
from rocmenv.engine.container import Container
from rocmenv.engine.gc import collect_garbage
from rocmenv.engine.overlay import prepare
from rocmenv.engine.podman import podman_args
from rocmenv.engine.protocol import ImageInfo
from rocmenv.errors import EngineError, RunNotStarted
from tests.support.fake_engine import FakeEngine

IMAGE = "127.0.0.1:5000/x/y:z"
VIEW = BindMount(source="/w/repo", target="/w/repo", kind="overlay", origin="checkout")


def spec(identity: Identity | None = None, **fields: object) -> RunSpec:
    identity = identity or Identity(session="5e55", owner_pid=4242, owner_host="h",
                                    owner_start=None)  # fmt: skip
    labels = run_labels(profile="fork", identity=identity, image_digest=None)
    return RunSpec(image=IMAGE, command=("true",), mounts=(VIEW,),
                   labels=tuple(sorted(labels.items())), untrusted=True, **fields)  # type: ignore[arg-type]  # fmt: skip


def test_renderings_without_an_engine_mount_the_overlay_read_only() -> None:
    args = render_docker(spec())
    assert "--mount=type=bind,source=/w/repo,target=/w/repo,readonly" in args
    (mount,) = create_body(spec(), tty=False, stdin_open=False)["HostConfig"]["Mounts"]
    assert mount == {"Type": "bind", "Source": "/w/repo", "Target": "/w/repo", "ReadOnly": True}


def test_podman_gets_its_own_overlay_volume() -> None:
    s = spec()
    args = podman_args(render_docker(s), s)
    assert "--volume=/w/repo:/w/repo:O" in args
    assert not [a for a in args if a.startswith("--mount=") and "/w/repo" in a]


def test_docker_gets_an_overlay_volume_over_two_labelled_scratch_volumes() -> None:
    engine = FakeEngine()
    s = spec()
    prepared = prepare(engine, s)
    assert prepared.volumes == ("rocmenv-5e55-upper", "rocmenv-5e55-work")
    assert engine.volumes["rocmenv-5e55-upper"]["rocmenv.owner-pid"] == "4242"
    assert engine.volumes["rocmenv-5e55-upper"]["rocmenv.purpose"] == "overlay"
    (arg,) = [a for a in prepared.cli_args(s, render_docker(s)) if "/w/repo" in a]
    data = "/var/lib/fake-engine/volumes/rocmenv-5e55"
    assert arg.startswith("--mount=type=volume,target=/w/repo,volume-driver=local,")
    assert (f'"volume-opt=o=lowerdir=/w/repo,upperdir={data}-upper/_data,'
            f'workdir={data}-work/_data"') in arg  # fmt: skip
    assert "volume-opt=type=overlay" in arg and "volume-opt=device=overlay" in arg
    body = create_body(s, tty=False, stdin_open=False)
    (mount,) = prepared.api_mounts(s, body["HostConfig"]["Mounts"])
    assert mount["Type"] == "volume" and "Source" not in mount  # anonymous: goes with it
    options = mount["VolumeOptions"]["DriverConfig"]["Options"]
    assert options["o"] == f"lowerdir=/w/repo,upperdir={data}-upper/_data,workdir={data}-work/_data"
    assert mount["VolumeOptions"]["Labels"]["rocmenv.session"] == "5e55"


class FailingSecond(FakeEngine):
    def create_volume(self, name: str, labels: Mapping[str, str]) -> str:
        if name.endswith("-work"):
            raise EngineError("no space left on device")
        return super().create_volume(name, labels)


def test_a_failed_scratch_volume_removes_the_one_made() -> None:
    engine = FailingSecond()
    with pytest.raises(EngineError):
        prepare(engine, spec())
    assert engine.volumes == {}


def test_the_scratch_volumes_go_with_the_container() -> None:
    engine = FakeEngine(images={IMAGE: ImageInfo(id="sha256:1")})
    with Container(engine, spec(), name="rocmenv-5e55") as box:
        assert len(engine.volumes) == 2
        assert box.id
    assert engine.volumes == {} and engine.containers == {}


def test_a_failed_create_sweeps_the_sessions_volumes() -> None:
    engine = FakeEngine(images={IMAGE: ImageInfo(id="sha256:1")})
    engine.create_volume("rocmenv-5e55-upper", {"rocmenv.session": "5e55"})
    engine.create_volume("someone-elses", {"rocmenv.session": "0ther"})
    engine.create_error = EngineError("refused")
    with pytest.raises(RunNotStarted), Container(engine, spec(), name="rocmenv-5e55"):
        pass
    assert list(engine.volumes) == ["someone-elses"]


def test_gc_removes_the_volumes_of_a_gone_owner_and_keeps_a_live_ones() -> None:
    engine = FakeEngine()
    gone = Identity(session="dead", owner_pid=2**22 + 7, owner_host=os.uname().nodename,
                    owner_start=None)  # fmt: skip
    alive = Identity.current()
    for ident in (gone, alive):
        prepare(engine, spec(ident))
    judged = collect_garbage(engine, dry_run=True)
    assert {(j.kind, j.name, j.verdict) for j in judged} == {
        ("volume", "rocmenv-dead-upper", "remove"), ("volume", "rocmenv-dead-work", "remove"),
        ("volume", f"rocmenv-{alive.session}-upper", "keep"),
        ("volume", f"rocmenv-{alive.session}-work", "keep"),
    }  # fmt: skip
    assert len(engine.volumes) == 4  # a dry run removes nothing
    collect_garbage(engine, dry_run=False)
    assert sorted(engine.volumes) == [f"rocmenv-{alive.session}-upper",
                                      f"rocmenv-{alive.session}-work"]  # fmt: skip
