"""rocmenv.image.pinning's decisions without a registry: which image a command uses, when a pin is
stale, what pin writes. (The same paths against the real registry: tests/integration.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.context import Context as _Ctx
from rocmenv.errors import CheckFailed, ConfigError
from rocmenv.grammar.reference import parse
from rocmenv.image.lock import Lock, LockEntry
from rocmenv.image.pinning import (
    choose_image,
    constraints_json,
    constraints_of,
    engine_reference,
    entry_matches_spec,
    pin_spec,
    unpinned_reference,
)
from rocmenv.registry.manifest import PlatformImage
from rocmenv.settings.profiles import BUILTIN_PROFILES, ImageSpec
from rocmenv.settings.resolve import Flags, Settings, settings_for

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
P1 = "sha256:" + "a" * 64
NIGHTLY = "v0.5.8-rocm700-mi30x-20260215"
NEWER = "v0.5.8-rocm700-mi30x-20260301"


def profile(**image: Any) -> Any:
    spec = ImageSpec(repository="docker.io/rocm/sgl-dev", **image)
    return replace(BUILTIN_PROFILES["cpu"], name="ci", image=spec)


def entry(tag: str | None = NIGHTLY, digest: str = D1, **kw: Any) -> LockEntry:
    return LockEntry(
        repository="docker.io/rocm/sgl-dev",
        tag=tag,
        digest=digest,
        media_type="application/vnd.oci.image.index.v1+json",
        platform="linux/amd64",
        platform_digest=P1,
        resolved_at="2026-12-01T00:00:00Z",
        **kw,
    )


class FakeClient:
    """A registry that knows a fixed tag list and answers one platform image."""

    def __init__(self, tags: list[str]) -> None:
        self.tags = tags
        self.asked: list[str] = []

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def list_tags(self, ref: Any, page_size: int | None = None) -> list[str]:
        self.asked.append(f"tags {ref.name}")
        return list(self.tags)

    def resolve_platform(self, ref: Any) -> PlatformImage:
        self.asked.append(f"platform {ref}")
        return PlatformImage(
            digest=D2,
            media_type="application/vnd.oci.image.index.v1+json",
            platform="linux/amd64",
            platform_digest=P1,
            platform_media_type="application/vnd.oci.image.manifest.v1+json",
            config_digest=None,
            registry="registry-1.docker.io",
        )


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return Context(env={"HOME": str(tmp_path)}, cwd=tmp_path)


def config(tmp_path: Path) -> Settings:
    """Settings without a project file, the lockfile in ``tmp_path``."""
    (tmp_path / ".git").mkdir(exist_ok=True)
    return settings_for(_Ctx(env={}, cwd=tmp_path), Flags(lockfile=tmp_path / "rocmenv.lock"))


def test_cli_image_beats_the_lock_and_gives_the_gpu_family_from_the_tag_grammar(
    ctx: Context, tmp_path: Path
) -> None:
    lock = Lock(profiles={"ci": entry()})
    choice = choose_image(
        ctx, config(tmp_path), profile(tag=NIGHTLY), cli_image=f"rocm/sgl-dev:{NEWER}", lock=lock
    )
    assert choice.source == "cli"
    assert choice.image == f"rocm/sgl-dev:{NEWER}"
    assert choice.gpu_family == "mi30x" and choice.digest is None


def test_a_pinned_profile_runs_the_locked_digest_not_the_tag(ctx: Context, tmp_path: Path) -> None:
    choice = choose_image(
        ctx, config(tmp_path), profile(tag=NIGHTLY), lock=Lock(profiles={"ci": entry()})
    )
    assert choice.source == "lock"
    assert choice.image == f"rocm/sgl-dev@{D1}"
    assert choice.repository == "rocm/sgl-dev" and choice.digest == D1
    assert choice.tag == NIGHTLY and choice.gpu_family == "mi30x"


def test_a_lock_pinned_through_a_mirror_pulls_the_canonical_reference(tmp_path: Path) -> None:
    # the daemon's registry-mirrors apply; the mirror in the lock is information only
    ref = engine_reference("docker.io/rocm/sgl-dev", D1, "127.0.0.1:5000")
    assert ref.familiar == f"rocm/sgl-dev@{D1}"
    ref = engine_reference("docker.io/rocm/sgl-dev", D1, "127.0.0.1:5000", pull_from_mirror=True)
    assert ref.familiar == f"127.0.0.1:5000/rocm/sgl-dev@{D1}"
    assert engine_reference("docker.io/rocm/sgl-dev", D1, "registry-1.docker.io").familiar == (
        f"rocm/sgl-dev@{D1}"
    )


def test_pull_from_mirror_takes_an_unpinned_reference_through_the_first_mirror() -> None:
    from rocmenv.settings.registry import RegistrySettings

    mirrors = (("docker.io", ("127.0.0.1:5000", "127.0.0.1:5001")),)
    on = RegistrySettings(mirrors=mirrors, pull_from_mirror=True)
    for text, want in (
        ("rocm/sgl-dev:v1", "127.0.0.1:5000/rocm/sgl-dev:v1"),
        (f"rocm/sgl-dev@{D1}", f"127.0.0.1:5000/rocm/sgl-dev@{D1}"),
        (f"docker.io/rocm/sgl-dev:v1@{D1}", f"127.0.0.1:5000/rocm/sgl-dev:v1@{D1}"),
        ("ghcr.io/x/y:v1", "ghcr.io/x/y:v1"),  # no mirror for that registry
    ):
        assert unpinned_reference(parse(text), on).familiar == want, text
    off = RegistrySettings(mirrors=mirrors)
    assert unpinned_reference(parse("rocm/sgl-dev:v1"), off).familiar == "rocm/sgl-dev:v1"


@pytest.mark.parametrize(
    "changed",
    [
        {"tag": NEWER},  # another tag
        {"digest": D2},  # a digest pin that differs from the lock
        {"gpu": "mi35x"},  # constraints where a tag was pinned
    ],
)
def test_a_profile_changed_since_it_was_pinned_is_refused(
    ctx: Context, tmp_path: Path, changed: dict[str, str]
) -> None:
    with pytest.raises(ConfigError, match="changed since it was pinned") as info:
        choose_image(ctx, config(tmp_path), profile(**changed), lock=Lock(profiles={"ci": entry()}))
    assert info.value.hint and "pin --profile ci --update" in info.value.hint


def test_an_unpinned_profile_uses_its_digest_then_its_tag(ctx: Context, tmp_path: Path) -> None:
    by_digest = choose_image(ctx, config(tmp_path), profile(tag=NIGHTLY, digest=D2), lock=Lock())
    assert (by_digest.source, by_digest.image, by_digest.tag) == (
        "profile",
        f"rocm/sgl-dev@{D2}",
        NIGHTLY,
    )
    by_tag = choose_image(ctx, config(tmp_path), profile(), lock=Lock())
    assert by_tag.image == "rocm/sgl-dev:latest" and by_tag.digest is None


def test_constraints_are_resolved_now_or_left_as_the_repository_offline(
    ctx: Context, tmp_path: Path
) -> None:
    client = FakeClient([NIGHTLY, NEWER, "v0.5.8-rocm700-mi35x-20260401", "junk"])
    wanted = profile(gpu="mi30x", family="nightly")
    choice = choose_image(
        ctx,
        config(tmp_path),
        wanted,
        lock=Lock(),
        client_factory=lambda: client,  # type: ignore[arg-type,return-value]
    )
    assert (choice.source, choice.tag, choice.image) == ("resolved", NEWER, f"rocm/sgl-dev:{NEWER}")
    offline = choose_image(ctx, config(tmp_path), wanted, lock=Lock(), resolve_constraints=False)
    assert (offline.source, offline.image) == ("profile", "rocm/sgl-dev")
    client.tags = ["junk"]
    with pytest.raises(CheckFailed, match="no tag of rocm/sgl-dev matches"):
        choose_image(ctx, config(tmp_path), wanted, lock=Lock(), client_factory=lambda: client)  # type: ignore[arg-type,return-value]


def test_a_profile_without_an_image_is_a_config_error_that_suggests_image(
    ctx: Context, tmp_path: Path
) -> None:
    bare = replace(BUILTIN_PROFILES["cpu"], image=None)
    with pytest.raises(ConfigError, match="names no image") as info:
        choose_image(ctx, config(tmp_path), bare, lock=Lock())
    assert info.value.hint and "--image" in info.value.hint


def test_pin_rules_tag_digest_and_constraints() -> None:
    assert entry_matches_spec(entry(), ImageSpec(repository="docker.io/rocm/sgl-dev", tag=NIGHTLY))
    assert not entry_matches_spec(
        entry(), ImageSpec(repository="docker.io/rocm/other", tag=NIGHTLY)
    )
    assert entry_matches_spec(
        entry(tag=None), ImageSpec(repository="docker.io/rocm/sgl-dev", digest=D1)
    )
    assert not entry_matches_spec(entry(), ImageSpec(repository="docker.io/rocm/sgl-dev"))  # latest
    spec = ImageSpec(repository="docker.io/rocm/sgl-dev", gpu="mi30x")
    recorded = tuple(sorted(constraints_json(constraints_of(spec)).items()))
    assert entry_matches_spec(entry(constraints=recorded), spec)
    assert not entry_matches_spec(
        entry(constraints=recorded), replace(spec, rocm="7.2")
    )  # constraints changed: re-pin


def test_pin_records_the_resolved_tag_the_constraints_and_the_platform() -> None:
    client = FakeClient([NIGHTLY, NEWER])
    spec = ImageSpec(repository="docker.io/rocm/sgl-dev", gpu="mi30x")
    pinned = pin_spec(client, spec)  # type: ignore[arg-type]
    assert pinned.tag == NEWER and pinned.digest == D2 and pinned.platform_digest == P1
    assert dict(pinned.constraints) == {"gpu": "mi30x"}
    assert client.asked[-1] == f"platform {parse('rocm/sgl-dev:' + NEWER)}"
    by_digest = pin_spec(client, ImageSpec(repository="docker.io/rocm/sgl-dev", digest=D1))
    assert by_digest.tag is None and dict(by_digest.constraints) == {}
