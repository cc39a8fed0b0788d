"""Issue 22, attack 6: ``rocmenv inspect`` of a hostile image is bounded in memory and time.

Each case serves one image from :class:`tests.support.hostile_registry.HostileRegistry` and
runs the real CLI as a subprocess under ``RLIMIT_AS`` (:func:`tests.support.bounded.run_bounded`,
so a regression ends in ``MemoryError`` rather than taking the machine down), then asserts the
exit code, the message, the peak RSS and the wall time. The time bounds are liveness bounds
(several times what the bounded code needs on a loaded 2-core machine, well under what the
unbounded code took), not benchmarks: the speed itself is measured by
``benchmarks/bench_layer.py`` and ``benchmarks/bench_inspect.py``.

What the code before this fix did: the gzip bomb reached 2.1 GB RSS (``MemoryError`` under
this limit) and ignored ``ROCMENV_REGISTRY_DEADLINE``; the ``pyvenv.cfg`` flood made a 409 MB
index (``MemoryError``, exit 70); the two ``METADATA`` layers took 47 s to merge; the ``.pth``
flood made the site scan quadratic; the planted digest made ``inspect`` read
``/some/path/planted.json`` and trust it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.bounded import Bounded, run_bounded
from tests.support.hostile_registry import SITE, HostileRegistry

pytestmark = pytest.mark.integration

ADDRESS_SPACE = 1536 << 20  # the 1.5 GB
#: Peak RSS of the whole command: a normal inspect peaks at ~50 MB; the layer index of one
#: image is capped at 32 MiB (limits.layer-index).
RSS_BOUND_MB = 300


def inspect(
    tmp_path: Path, host: str, *extra: str, timeout: float = 120.0, **env_extra: str
) -> Bounded:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().endswith("_PROXY") and not k.startswith(("ROCMENV_", "GITHUB_"))
    }
    env.update(
        {
            "HOME": str(tmp_path),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "ROCMENV_REGISTRY_BACKOFF": "0.01",
            "ROCMENV_REGISTRY_RETRIES": "1",
            "ROCMENV_TOKEN_CACHE": "0",
            **env_extra,
        }
    )
    return run_bounded(
        [sys.executable, "-m", "rocmenv", "inspect", f"{host}/x/y:latest", *extra],
        address_space=ADDRESS_SPACE,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )


def assert_refused(done: Bounded, *needles: str) -> None:
    assert done.code == 3, done.describe()
    for needle in needles:
        assert needle in done.stderr, done.describe()
    assert "Traceback" not in done.stderr, done.describe()
    assert done.peak_rss_mb < RSS_BOUND_MB, done.describe()


def cache_bytes(tmp_path: Path) -> int:
    root = tmp_path / "cache"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def test_a_gzip_bomb_layer_stops_at_the_command_deadline_in_bounded_memory(tmp_path: Path) -> None:
    """The deadline is a quarter of the time the bomb takes to inflate on a fast machine: a
    CI machine inflated all 20 GiB in 19.8 s (~1 GB/s), under the 20 s deadline this test
    had, and the command succeeded; 5 s needs a machine four times faster than that."""
    with HostileRegistry("gzip-bomb") as reg:
        done = inspect(tmp_path, reg.host, ROCMENV_REGISTRY_DEADLINE="5")
    assert_refused(done, "deadline (5 s)", "ROCMENV_REGISTRY_DEADLINE")
    assert 4 < done.seconds < 30, done.describe()  # stopped by the deadline, soon after it


def test_a_gzip_bomb_layer_stops_at_the_configured_layer_limit(tmp_path: Path) -> None:
    config = tmp_path / "site.toml"
    config.write_text("[registry]\nlimits = { layer = 1073741824 }\n")
    with HostileRegistry("gzip-bomb") as reg:
        done = inspect(tmp_path, reg.host, ROCMENV_CONFIG=str(config))
    assert_refused(done, "over its limit of 1073741824 bytes", "limits.layer")
    assert done.seconds < 60, done.describe()  # 1 GiB of zeros, not 20 GiB
    assert cache_bytes(tmp_path) == 0  # nothing of the refused layer was kept


def test_a_flood_of_4_mib_pyvenv_cfg_files_is_refused_at_the_index_limit(tmp_path: Path) -> None:
    with HostileRegistry("pyvenv-flood") as reg:
        done = inspect(tmp_path, reg.host)
    assert_refused(done, "limits.layer-index", "over its limit of 33554432 bytes")
    assert done.seconds < 60, done.describe()
    assert cache_bytes(tmp_path) < 1 << 20  # not a 409 MB index


def test_two_layers_of_20000_metadata_files_are_merged_in_linear_time(tmp_path: Path) -> None:
    with HostileRegistry("metadata-40k") as reg:
        cold = inspect(tmp_path, reg.host, "--json")
        warm = inspect(tmp_path, reg.host, "--json")  # the indexes are cached: merge only
    for done in (cold, warm):
        assert done.code == 0, done.describe()
        assert done.peak_rss_mb < RSS_BOUND_MB, done.describe()
        doc = json.loads(done.stdout)
        assert len(doc["distributions"]) == 40000
        assert doc["distributions"]["pkg-a0"] == doc["distributions"]["pkg-b19999"] == "1.0"
    assert json.loads(warm.stdout)["read"]["layers_read"] == 0
    assert cold.seconds < 60, cold.describe()
    assert warm.seconds < 20, warm.describe()  # was 47 s, warm too


def test_a_pth_file_adding_20000_directories_keeps_the_site_scan_linear(tmp_path: Path) -> None:
    with HostileRegistry("pth-flood") as reg:
        done = inspect(tmp_path, reg.host, "--json")
    assert done.code == 0, done.describe()
    assert done.peak_rss_mb < RSS_BOUND_MB, done.describe()
    doc = json.loads(done.stdout)
    assert len(doc["distributions"]) == 20000
    sites = doc["python"]["site_dirs"]
    assert "/opt/flood/d0" in sites and "/opt/flood/d19999" in sites
    assert sites.index(f"/{SITE}") < sites.index("/opt/flood/d0")
    assert done.seconds < 30, done.describe()


def test_a_layer_digest_that_is_a_path_never_becomes_a_cache_path(tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    evil = {
        "index_version": 1,
        "digest": f"sha256:{planted}",
        "media_type": "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "targets": ["aiter.ops.shuffle"],
        "files": {
            "usr/lib/python3.11/os.py": "",
            f"{SITE}/evil-6.6.6.dist-info/METADATA": "Name: evil\nVersion: 6.6.6",
        },
        "links": {"usr/bin/python3": "python3.11"},
        "whiteouts": [],
        "opaque": [],
        "bytes": 1,
        "size": 1,
    }
    for version in (1, 2):  # whatever the index version is, the file is never read
        (tmp_path / "planted.json").write_text(json.dumps({**evil, "index_version": version}))
        with HostileRegistry("planted-digest", planted=str(planted)) as reg:
            done = inspect(tmp_path, reg.host, "--json")
            layer_requests = [p for p in reg.blob_requests if str(planted) in p]
        assert_refused(done, "is not a valid digest")
        assert "evil" not in done.stdout + done.stderr
        assert layer_requests == []  # refused before anything was asked for it
        assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json"))


def test_the_first_failing_layer_stops_the_others(tmp_path: Path) -> None:
    """The flood fails in a second or two; the bomb beside it must stop then, not run on
    for the minute its 20 GiB take (nor until the command's deadline)."""
    with HostileRegistry("bomb-and-flood") as reg:
        done = inspect(tmp_path, reg.host)
    assert_refused(done, "limits.layer-index")
    assert done.seconds < 20, done.describe()


def test_a_layer_larger_than_its_descriptor_says_is_refused(tmp_path: Path) -> None:
    with HostileRegistry("size-lie") as reg:
        done = inspect(tmp_path, reg.host)
    assert_refused(done, "more than the", "bytes its manifest gives")
    assert cache_bytes(tmp_path) == 0


def test_a_dripping_layer_stops_at_the_command_deadline(tmp_path: Path) -> None:
    """Each byte arrives within the read timeout, so only the command's deadline ends it
    (the urllib stream before took the 2 minutes the drip lasts)."""
    with HostileRegistry("drip-layer") as reg:
        done = inspect(tmp_path, reg.host, ROCMENV_REGISTRY_DEADLINE="5")
    assert_refused(done, "deadline (5 s)", "ROCMENV_REGISTRY_DEADLINE")
    assert done.seconds < 20, done.describe()
