"""``inspect``'s verdict does not depend on the layer cache (issue 34): an image over
``limits.image`` is refused when its layers come from the registry and when they come from
the cache an earlier ``inspect`` filled; under the limit it passes either way. The demo image
of the local registry; the limit is set one byte under (or at) what its layers hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import testenv


def inspect(home: Path, cache: Path, ref: str, limit: int | None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMENV_", "GITHUB_"))}
    env.update({"HOME": str(home), "XDG_CACHE_HOME": str(cache), "ROCMENV_SITE_CONFIG": ""})
    if limit is not None:
        config = home / f"limit-{limit}.toml"
        config.write_text(f"[registry]\nlimits = {{ image = {limit} }}\n")
        env["ROCMENV_CONFIG"] = str(config)
    done = subprocess.run(
        [sys.executable, "-m", "rocmenv", "inspect", ref, "--json"], cwd=home, env=env,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode


def test_the_image_limit_gives_one_verdict_cold_and_warm(
    tmp_path: Path, family: testenv.Family
) -> None:
    ref = family["demo"].ref
    warm = tmp_path / "warm"
    assert inspect(tmp_path, warm, ref, None) == 0  # fills the cache
    indexes = [json.loads(p.read_text()) for p in (warm / "rocmenv" / "layers").rglob("*.json")]
    total = sum(i["size"] for i in indexes)
    assert indexes and total > 0
    for limit, verdict in ((total - 1, 3), (total, 0)):
        cold = tmp_path / f"cold-{limit}"
        assert inspect(tmp_path, cold, ref, limit) == verdict, f"cold, limit {limit}"
        assert inspect(tmp_path, warm, ref, limit) == verdict, f"warm, limit {limit}"
