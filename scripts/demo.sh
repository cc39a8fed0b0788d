#!/usr/bin/env bash
# scripts/demo.sh — the README's main job, on a fresh Debian/Ubuntu machine (as root):
#
#   1. scripts/setup.sh: apt + pip installs, dockerd, the local registry (a stand-in for
#      Docker Hub's rocm/sgl-dev), the demo image family (idempotent: seconds when up);
#   2. in examples/: `rocmenv pin` — resolve the demo profile's tag to a digest in
#      examples/rocmenv.lock (through the registry mirror of examples/rocmenv.toml);
#   3. `rocmenv run -- python test_x.py` in that pinned image, whose aiter (0.1.9.post1)
#      predates shuffle_scale: the shim launcher adds it in the main process AND in a spawn
#      worker (one "rocmenv: shim … applied" line each);
#   4. the same with --no-shims, to show what the test would hit without rocmenv.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

if [ "${ROCMENV_SKIP_SETUP:-}" != 1 ]; then
  scripts/setup.sh
fi
export PATH="$REPO/.venv/bin:$PATH"
cd "$REPO/examples"

banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

banner "rocmenv pin   (examples/rocmenv.toml, profile demo)"
rocmenv pin --update

banner "rocmenv run -- python test_x.py"
rocmenv run -- python test_x.py

banner "rocmenv run --no-shims -- python test_x.py   (expected to fail: no shuffle_scale)"
set +e
rocmenv run --no-shims -- python test_x.py 2>&1 | tail -n 3
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 0 ]; then
  echo "demo: unexpected: the image has shuffle_scale without the shim" >&2
  exit 1
fi
echo "(exit $status without the shim, as expected)"
banner "demo: done — the shim was applied in every Python process of the container"
