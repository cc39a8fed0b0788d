"""Optional mounts (``optional = true``; the built-in profiles' ``/data/miles_ci``): skipped
where the source is absent when rendering for this host, kept with ``-v`` semantics (the
engine creates an absent source) when rendering for another host — and in untrusted mode
still judged by the allowlist, the denylist and the read-only rule (issue 30, items 3-4).
The engine's side (``docker create`` with the rendered options on a host without the
directory) is ``tests/integration/container/test_options.py``."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rocmenv.container.guard import Guard, optional_mount_sources
from rocmenv.container.plan import build_spec
from rocmenv.container.render import create_body, render_compose, render_docker, render_gha
from rocmenv.container.runspec import HostFacts, Overrides, RunSpec
from rocmenv.errors import PolicyViolation, UsageError
from rocmenv.settings.policy import Policy
from rocmenv.settings.profiles import BUILTIN_PROFILES, Mount

CPU = BUILTIN_PROFILES["cpu"]
DATA = Mount(source="/srv/ci-data", target="/data", optional=True)
REQUIRED = Mount(source="/srv/ci-models", target="/models")


def facts(tmp_path: Path, *, here: bool, exists: bool = False) -> HostFacts:
    checkout = tmp_path / "repo"
    (checkout / ".git").mkdir(parents=True, exist_ok=True)
    return HostFacts(
        env={}, cwd=checkout, checkout=checkout, inventory=None, check_host=here,
        path_exists=lambda p: exists or p.startswith(str(tmp_path)), realpath=os.path.realpath,
    )  # fmt: skip


def spec_for(tmp_path: Path, *mounts: Mount, here: bool, guard: Guard | None = None) -> RunSpec:
    profile = replace(CPU, mounts=mounts)
    if guard is not None:
        profile = replace(profile, name="fork", source="/fork/rocmenv.toml")
    return build_spec(profile, Overrides(), facts(tmp_path, here=here), image="IMAGE", guard=guard)


def data_mounts(spec: RunSpec) -> dict[str, tuple[bool, bool]]:
    """target -> (read-only, the engine creates an absent source)"""
    return {
        m.target: (m.readonly, m.create_source)
        for m in spec.mounts
        if m.origin not in ("checkout", "guard")  # the checkout and its .git (untrusted)
    }


def test_for_another_host_an_optional_mount_is_kept_and_may_be_created(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, DATA, REQUIRED, here=False)
    assert data_mounts(spec) == {"/data": (False, True), "/models": (False, False)}
    words = render_gha(spec).split()
    assert "--volume=/srv/ci-data:/data" in words
    assert "--mount=type=bind,source=/srv/ci-models,target=/models" in words
    assert not any("ci-data" in w for w in words if w.startswith("--mount="))


def test_for_this_host_an_absent_optional_source_is_skipped_with_a_note(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, DATA, here=True)
    assert data_mounts(spec) == {}
    assert spec.notes == ("optional mounts skipped, source absent: /srv/ci-data",)
    present = build_spec(replace(CPU, mounts=(DATA,)), Overrides(),
                         facts(tmp_path, here=True, exists=True), image="IMAGE")  # fmt: skip
    # present on this host: mounted as any other (the engine must not create anything)
    assert data_mounts(present) == {"/data": (False, False)}
    assert "--mount=type=bind,source=/srv/ci-data,target=/data" in render_docker(present)


def test_a_required_absent_source_is_still_an_error_for_this_host(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="/srv/ci-models"):
        spec_for(tmp_path, REQUIRED, here=True)


def test_compose_and_the_engine_api_say_the_same_as_minus_v(tmp_path: Path) -> None:
    ro = replace(DATA, readonly=True)
    spec = spec_for(tmp_path, ro, REQUIRED, here=False)
    volumes = yaml.safe_load(render_compose(spec))["services"]["cpu"]["volumes"]
    created = {v["target"]: v["bind"]["create_host_path"] for v in volumes}
    assert created == {"/data": True, "/models": False, str(spec.checkout): False}
    assert next(v for v in volumes if v["target"] == "/data")["read_only"] is True
    host = create_body(spec, tty=False, stdin_open=False)["HostConfig"]
    assert host["Binds"] == ["/srv/ci-data:/data:ro"]
    assert "/data" not in {m["Target"] for m in host["Mounts"]}


def test_a_path_minus_v_cannot_carry_is_refused_not_mangled(tmp_path: Path) -> None:
    odd = Mount(source="/srv/a:b", target="/data", optional=True)
    with pytest.raises(UsageError, match="':'"):
        spec_for(tmp_path, odd, here=False)


def test_the_builtin_profiles_keep_the_reference_data_mounts_as_optional() -> None:
    for name in ("rocm", "cpu"):
        mounts = BUILTIN_PROFILES[name].mounts
        assert mounts[0].source == "/data/miles_ci"
        assert all(m.optional and m.source.startswith("/data/miles_ci") for m in mounts)
    assert optional_mount_sources() == tuple(sorted(m.source for m in CPU.mounts))


# -- untrusted mode: the rules for mounts hold for optional mounts too ------------------------

# what the trusted side declared: the allowlist root and the sources it declares optional
TRUSTED = Guard(policy=Policy(mount_sources=("/srv",)), optional_sources=("/srv/ci-data",))


def test_untrusted_optional_mounts_are_read_only_and_keep_a_declared_created_source(
    tmp_path: Path,
) -> None:
    spec = spec_for(tmp_path, DATA, here=False, guard=TRUSTED)
    assert data_mounts(spec) == {"/data": (True, True)}
    assert "--volume=/srv/ci-data:/data:ro" in render_gha(spec).split()


def test_an_untrusted_profile_does_not_choose_directories_the_engine_creates(
    tmp_path: Path,
) -> None:
    """Under the allowlisted root, but not a source the trusted side declared optional: the
    engine must find it (``--mount``), it does not make it."""
    other = Mount(source="/srv/ci-data/planted", target="/planted", optional=True)
    spec = spec_for(tmp_path, other, here=False, guard=TRUSTED)
    assert data_mounts(spec) == {"/planted": (True, False)}
    assert "optional mount sources must exist: /srv/ci-data/planted" in spec.notes[0]
    assert not any(w.startswith("--volume=") for w in render_gha(spec).split())


@pytest.mark.parametrize("source", ["/elsewhere/data", "/etc/ssl", "/var/lib/docker/x"])
def test_an_optional_mount_outside_the_allowlist_or_on_the_denylist_is_refused(
    tmp_path: Path, source: str
) -> None:
    mount = Mount(source=source, target="/x", optional=True)
    guard = (
        TRUSTED if source.startswith("/elsewhere") else Guard(policy=Policy(mount_sources=("/",)))
    )
    for here in (False, True):
        facts_exist = here  # for this host: present, so it is not skipped before the guard
        profile = replace(CPU, mounts=(mount,), name="fork", source="/fork/rocmenv.toml")
        host = facts(tmp_path, here=here, exists=facts_exist)
        with pytest.raises(PolicyViolation, match="mounts = "):
            build_spec(profile, Overrides(), host, image="IMAGE", guard=guard)
