"""The runner image cache against the real registry on 127.0.0.1:5000, the real Docker
engine (both adapters) and podman: jobs are real ``rocmenv`` processes sharing one cache
directory; faults come from the fault proxy in front of the registry."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.run.test_pull import push_random_image
from tests.support import testenv
from tests.support.faultproxy import FaultProxy, Match, hang, truncate

pytestmark = pytest.mark.integration

ENGINES = ("docker-api", "docker-cli", "podman")
MB = 1_000_000


def job(
    home: Path, cache: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """One CI job: a ``rocmenv`` process with the runner's cache."""
    full = {
        **os.environ,
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "xdg-cache"),
        "ROCMENV_IMAGE_CACHE": str(cache),
        "ROCMENV_SITE_CONFIG": "",
        **(env or {}),
    }
    full.pop("GITHUB_ACTIONS", None)
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args], cwd=home, env=full, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip


def pulled(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)["pulled"][0]
    return doc


def engine_has(engine: str, image_id: str) -> bool:
    cli = "podman" if engine == "podman" else "docker"
    done = subprocess.run([cli, "image", "inspect", image_id], capture_output=True, check=False)
    return done.returncode == 0


def remove(engine: str, image_id: str) -> None:
    cli = "podman" if engine == "podman" else "docker"
    subprocess.run([cli, "rmi", "--force", image_id], capture_output=True, check=False)


def blobs_verified(cache: Path) -> bool:
    for path in (cache / "blobs" / "sha256").iterdir():
        if hashlib.sha256(path.read_bytes()).hexdigest() != path.name:
            return False
    return True


@pytest.fixture
def loaded() -> Iterator[list[tuple[str, str]]]:
    """(engine, image id) pairs to remove from the shared engines afterwards."""
    items: list[tuple[str, str]] = []
    yield items
    for engine, image_id in items:
        remove(engine, image_id)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_later_job_loads_the_image_from_the_cache_with_no_registry_request(
    tmp_path: Path, scratch_repo: str, engine: str, loaded: list[tuple[str, str]]
) -> None:
    if engine == "podman":
        testenv.need("podman")
    digest, layers = push_random_image(scratch_repo, "t1", (1 * MB, 2 * MB))
    cache = tmp_path / "cache"
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        ref = f"127.0.0.1:{proxy.port}/{scratch_repo}@{digest}"
        first = pulled(job(tmp_path, cache, "pull", "--engine", engine, "--json", ref))
        image_id = str(first["present_as"])
        loaded.append((engine, image_id))
        assert first["source"] == "upstream" and engine_has(engine, image_id)
        assert int(first["network_bytes"]) >= 3 * MB  # type: ignore[call-overload]
        remove(engine, image_id)  # the next job's engine is fresh
        requests = len(proxy.log)
        second = pulled(job(tmp_path, cache, "pull", "--engine", engine, "--json", ref))
        assert second["source"] == "cache" and second["network_bytes"] == 0
        assert len(proxy.log) == requests  # the registry was not asked anything
    assert second["present_as"] == image_id and engine_has(engine, image_id)
    assert {f"sha256:{p.name}" for p in (cache / "blobs" / "sha256").iterdir()} >= set(layers)


def test_several_engines_and_jobs_at_once_fetch_each_blob_from_the_network_once(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    testenv.need("podman")
    digest, layers = push_random_image(scratch_repo, "t1", (3 * MB, 3 * MB, 3 * MB))
    cache = tmp_path / "cache"
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        ref = f"127.0.0.1:{proxy.port}/{scratch_repo}@{digest}"
        procs = []
        for n, engine in enumerate(ENGINES):
            home = tmp_path / f"job{n}"
            home.mkdir()
            env = {**os.environ, "XDG_DATA_HOME": str(home / "d"), "ROCMENV_SITE_CONFIG": "",
                   "XDG_CACHE_HOME": str(home / "c"), "ROCMENV_IMAGE_CACHE": str(cache)}  # fmt: skip
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "rocmenv", "pull", "--engine", engine, "--json", ref],
                cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))  # fmt: skip
        outs = [p.communicate(timeout=300) for p in procs]
        for engine, p, (out, err) in zip(ENGINES, procs, outs, strict=True):
            assert p.returncode == 0, err
            loaded.append((engine, str(json.loads(out)["pulled"][0]["present_as"])))
        for layer in layers:
            gets = proxy.count(method="GET", path=rf"/v2/.*/blobs/{layer}")
            assert gets == 1, f"{layer} fetched {gets} times"
    assert all(engine_has(engine, image_id) for engine, image_id in loaded)


def test_a_job_killed_mid_fetch_leaves_nothing_unverified_and_the_next_completes(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    digest, layers = push_random_image(scratch_repo, "t1", (8 * MB,))
    cache = tmp_path / "cache"
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        # the layer's first answer sends half of it, then hangs: the job is killed meanwhile
        proxy.add_rule(Match(method="GET", path=rf"/v2/.*/blobs/{layers[0]}"), truncate(4 * MB),
                       times=1)  # fmt: skip
        proxy.add_rule(Match(method="GET", path=rf"/v2/.*/blobs/{layers[0]}"), hang(60), times=1)
        ref = f"127.0.0.1:{proxy.port}/{scratch_repo}@{digest}"
        env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "d"), "ROCMENV_SITE_CONFIG": "",
               "XDG_CACHE_HOME": str(tmp_path / "c"), "ROCMENV_IMAGE_CACHE": str(cache)}  # fmt: skip
        victim = subprocess.Popen(
            [sys.executable, "-m", "rocmenv", "pull", "--engine", "docker-cli", ref],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        partial = cache / "partial" / "sha256" / layers[0].partition(":")[2]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if partial.exists() and partial.stat().st_size >= 4 * MB:
                break
            time.sleep(0.05)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(30)
        assert partial.stat().st_size >= 4 * MB
        assert not (cache / "blobs" / "sha256" / layers[0].partition(":")[2]).exists()
        done = pulled(job(tmp_path, cache, "pull", "--engine", "docker-cli", "--json", ref))
        loaded.append(("docker-cli", str(done["present_as"])))
    assert engine_has("docker-cli", str(done["present_as"])) and blobs_verified(cache)
    assert int(done["network_bytes"]) <= 4 * MB + 100_000  # type: ignore[call-overload]


def test_a_stalled_mirror_is_left_for_the_registry_keeping_what_it_sent(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    digest, layers = push_random_image(scratch_repo, "t1", (6 * MB,))
    cache = tmp_path / "cache"
    with (
        FaultProxy(upstream="127.0.0.1:5000") as upstream,
        FaultProxy(upstream="127.0.0.1:5000") as mirror,
    ):
        mirror.add_rule(Match(method="GET", path=rf"/v2/.*/blobs/{layers[0]}"), truncate(2 * MB),
                        times=1)  # fmt: skip
        mirror.add_rule(Match(method="GET", path=r"/v2/.*/blobs/.*"), hang(120))
        ref = f"127.0.0.1:{upstream.port}/{scratch_repo}@{digest}"
        env = {"ROCMENV_MIRRORS": f"127.0.0.1:{upstream.port}=127.0.0.1:{mirror.port}",
               "ROCMENV_SOURCE_WINDOW": "2"}  # fmt: skip
        start = time.monotonic()
        done = job(tmp_path, cache, "pull", "--engine", "docker-cli", "--json", ref, env=env)
        took = time.monotonic() - start
        doc = pulled(done)
        loaded.append(("docker-cli", str(doc["present_as"])))
        upstream_ranges = [
            e for e in upstream.log if "blobs/sha256" in e.path and e.method == "GET"
        ]
    switches = [line for line in done.stderr.splitlines() if "leaving" in line]
    assert len(switches) == 1 and f"127.0.0.1:{mirror.port}" in switches[0]
    assert doc["source"] == "mirror+upstream"
    assert int(doc["network_bytes"]) < 6 * MB + 200_000  # type: ignore[call-overload]
    assert upstream_ranges  # the rest came from the registry …
    assert took < 60  # … within the window, not the mirror's 120 s hang
    assert engine_has("docker-cli", str(doc["present_as"]))


def test_a_blob_corrupted_in_the_cache_is_never_loaded(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    digest, layers = push_random_image(scratch_repo, "t1", (1 * MB,))
    cache = tmp_path / "cache"
    ref = f"127.0.0.1:5000/{scratch_repo}@{digest}"
    first = pulled(job(tmp_path, cache, "pull", "--engine", "docker-cli", "--json", ref))
    image_id = str(first["present_as"])
    loaded.append(("docker-cli", image_id))
    remove("docker-cli", image_id)
    blob = cache / "blobs" / "sha256" / layers[0].partition(":")[2]
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    bad = job(tmp_path, cache, "pull", "--engine", "docker-cli", "--json", ref)
    assert bad.returncode == 3, bad.stderr  # a registry-class error: the data is bad
    assert not engine_has("docker-cli", image_id)
    again = pulled(job(tmp_path, cache, "pull", "--engine", "docker-cli", "--json", ref))
    assert again["source"] == "upstream" and engine_has("docker-cli", image_id)


def test_run_starts_the_container_from_the_image_the_cache_loaded(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    digest = testenv.push_manifest_copy("127.0.0.1:5000/rocmenv-test/base:py311", scratch_repo,
                                        "py311")  # fmt: skip
    ref = f"127.0.0.1:5000/{scratch_repo}@{digest}"
    cache = tmp_path / "cache"
    (tmp_path / "rocmenv.toml").write_text("")
    done = job(tmp_path, cache, "run", "--engine", "docker-cli", "--profile", "cpu", "--image",
               ref, "--", "python3", "-c", "print('from the cache')")  # fmt: skip
    status = job(tmp_path, cache, "cache", "status", "--json")
    images = json.loads(status.stdout)["images"]
    loaded.extend(("docker-cli", str(i["config"])) for i in images)
    assert done.returncode == 0, done.stderr
    assert "from the cache" in done.stdout
    assert [i["manifest"] for i in images] == [digest]


def lockfile(path: Path, *digests: str) -> Path:
    """A project lockfile pinning ``digests`` (the fields the cache reads from it)."""
    path.write_text(
        json.dumps({"profiles": {f"p{n}": {"digest": d} for n, d in enumerate(digests)}})
    )
    return path


def cached_layers(cache: Path) -> set[str]:
    return {f"sha256:{p.name}" for p in (cache / "blobs" / "sha256").iterdir()}


def test_a_full_cache_prunes_the_least_recently_used_but_never_a_pinned_image_first(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    """Three images of 3 MB in a cache capped at 7 MB: the third job's fetch makes room by
    removing the least recently used image that no lockfile pins (the second), not the
    pinned one used before it (the first)."""
    first, first_layers = push_random_image(scratch_repo, "a", (3 * MB,))
    second, second_layers = push_random_image(scratch_repo, "b", (3 * MB,))
    third, third_layers = push_random_image(scratch_repo, "c", (3 * MB,))
    cache = tmp_path / "cache"
    lockfile(tmp_path / "rocmenv.lock", first)
    env = {"ROCMENV_IMAGE_CACHE_MAX": "7m"}
    for digest in (first, second, third):
        doc = pulled(job(tmp_path, cache, "pull", "--engine", "docker-cli", "--json",
                         f"127.0.0.1:5000/{scratch_repo}@{digest}", env=env))  # fmt: skip
        loaded.append(("docker-cli", str(doc["present_as"])))
        time.sleep(0.05)  # distinct last-use times
    held = cached_layers(cache)
    assert set(first_layers) <= held and set(third_layers) <= held
    assert not set(second_layers) & held
    status = json.loads(job(tmp_path, cache, "cache", "status", "--json").stdout)
    assert {i["manifest"] for i in status["images"]} == {first, third}
    assert [i["pinned"] for i in status["images"] if i["manifest"] == first] == [True]


def test_cache_prune_bounds_the_cache_by_hand_and_pins_go_last(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    old, old_layers = push_random_image(scratch_repo, "a", (2 * MB,))
    new, new_layers = push_random_image(scratch_repo, "b", (2 * MB,))
    cache = tmp_path / "cache"
    for digest in (old, new):
        doc = pulled(job(tmp_path, cache, "pull", "--engine", "docker-cli", "--json",
                         f"127.0.0.1:5000/{scratch_repo}@{digest}"))  # fmt: skip
        loaded.append(("docker-cli", str(doc["present_as"])))
        time.sleep(0.05)
    pins = lockfile(tmp_path / "other.lock", old)
    dry = job(tmp_path, cache, "cache", "prune", "--max-size", "3m", "--lock", str(pins),
              "--dry-run", "--json")  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert cached_layers(cache) >= set(old_layers) | set(new_layers)  # a dry run removes nothing
    done = job(tmp_path, cache, "cache", "prune", "--max-size", "3m", "--lock", str(pins),
               "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    removed = {r["digest"] for r in json.loads(done.stdout)["removed"]}
    assert set(new_layers) <= removed and not set(old_layers) & removed
    assert set(old_layers) <= cached_layers(cache)
    assert json.loads(dry.stdout)["removed"] == json.loads(done.stdout)["removed"]
    emptied = job(tmp_path, cache, "cache", "prune", "--all", "--json")
    assert emptied.returncode == 0 and not cached_layers(cache)
    assert json.loads(job(tmp_path, cache, "cache", "status", "--json").stdout)["images"] == []


def test_cache_commands_without_a_cache_are_a_usage_error(tmp_path: Path) -> None:
    done = job(tmp_path, tmp_path / "unused", "cache", "status", env={"ROCMENV_IMAGE_CACHE": ""})
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_docker_pulls_a_cold_image_from_the_cache_served_on_loopback(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    """The first job on an empty cache: Docker pulls from the cache's loopback registry (the
    engine records that repository digest), not from the registry itself, nor a load."""
    digest, _ = push_random_image(scratch_repo, "t1", (2 * MB, 2 * MB))
    cache = tmp_path / "cache"
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        doc = pulled(job(tmp_path, cache, "pull", "--engine", "docker-api", "--json",
                         f"127.0.0.1:{proxy.port}/{scratch_repo}@{digest}"))  # fmt: skip
    image_id = str(doc["present_as"])
    loaded.append(("docker-api", image_id))
    inspect = subprocess.run(["docker", "image", "inspect", "--format", "{{json .RepoDigests}}",
                              image_id], capture_output=True, text=True, check=True)  # fmt: skip
    repo_digests = json.loads(inspect.stdout)
    assert any(
        d.startswith("127.0.0.1:") and d.endswith(f"/{scratch_repo}@{digest}")
        and not d.startswith(f"127.0.0.1:{proxy.port}/")
        for d in repo_digests
    ), repo_digests  # fmt: skip


def test_a_cold_job_asks_the_registry_for_each_thing_once_and_the_config_as_a_blob(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    """The first job on an empty cache asks the registry for the manifest, the config and
    each layer, each where the registry keeps it: a config asked for at ``/manifests/`` is
    answered with a 500 by the Distribution registry, which the client retried for seconds
    before it asked at ``/blobs/`` (the first job of the image cache benchmark waited 5.5 s
    on it with nothing on the link)."""
    digest, layers = push_random_image(scratch_repo, "t1", (1 * MB, 1 * MB))
    cache = tmp_path / "cache"
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        doc = pulled(job(tmp_path, cache, "pull", "--engine", "docker-api", "--json",
                         f"127.0.0.1:{proxy.port}/{scratch_repo}@{digest}"))  # fmt: skip
        log = [(e.method.upper(), e.path.split("?", 1)[0], e.status or 0) for e in proxy.log]
    loaded.append(("docker-api", str(doc["present_as"])))
    config = str(doc["present_as"])  # the image id: the config's digest
    assert [entry for entry in log if entry[2] >= 400] == [], log
    manifests = [path for _, path, _ in log if "/manifests/" in path]
    assert manifests == [f"/v2/{scratch_repo}/manifests/{digest}"], log
    gets = [path for method, path, _ in log if method == "GET" and "/blobs/" in path]
    assert sorted(gets) == sorted(f"/v2/{scratch_repo}/blobs/{d}" for d in [config, *layers])


def test_the_step_summary_says_where_the_image_came_from_and_what_crossed_the_network(
    tmp_path: Path, scratch_repo: str, loaded: list[tuple[str, str]]
) -> None:
    digest, _ = push_random_image(scratch_repo, "t1", (1 * MB,))
    cache = tmp_path / "cache"
    summary = tmp_path / "summary.md"
    ref = f"127.0.0.1:5000/{scratch_repo}@{digest}"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    for _ in range(2):
        full = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "d"), "ROCMENV_SITE_CONFIG": "",
                "XDG_CACHE_HOME": str(tmp_path / "c"), "ROCMENV_IMAGE_CACHE": str(cache), **env}  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "rocmenv", "pull", "--engine", "docker-cli",
                               "--json", ref], cwd=tmp_path, env=full, capture_output=True,
                              text=True, timeout=300, check=False)  # fmt: skip
        doc = pulled(done)
        loaded.append(("docker-cli", str(doc["present_as"])))
        remove("docker-cli", str(doc["present_as"]))
    lines = summary.read_text().splitlines()
    assert len(lines) == 2 and all(f"`{ref}`" in line for line in lines)
    assert "from upstream" in lines[0] and "from cache, 0 B" in lines[1]
