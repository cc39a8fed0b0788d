#!/usr/bin/env bash
# scripts/test.sh [PYTEST ARGS...] — the project's test command (README, Makefile, CI).
#
# Runs scripts/setup.sh (idempotent: seconds when the environment is up), then
# pytest (default: the whole tests/ tree), ruff check, ruff format --check and mypy.
# Every check runs even when an earlier one fails; the exit status is non-zero if any failed.
#
#   ROCMENV_REQUIRE_ENGINE=1   every skip is a failure (a missing engine, registry, git,
#                              system Python, tool …); the skip count printed at the end must
#                              be 0 or the run fails (.ci/run sets it)
#   ROCMENV_SKIP_SETUP=1       do not run scripts/setup.sh (environment already up, not root)
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

if [ "${ROCMENV_SKIP_SETUP:-}" != 1 ]; then
  scripts/setup.sh || { echo "test: scripts/setup.sh failed" >&2; exit 1; }
fi

BIN="$REPO/.venv/bin"
failed=()
run_check() { # NAME CMD...
  local name=$1
  shift
  printf '== %s\n' "$name"
  if ! "$@"; then failed+=("$name"); fi
}

if [ $# -eq 0 ]; then set -- tests/; fi
JUNIT="$(mktemp "${TMPDIR:-/tmp}/rocmenv-junit.XXXXXX.xml")"
trap 'rm -f "$JUNIT"' EXIT
run_check pytest "$BIN/pytest" --junitxml="$JUNIT" "$@"
# The skip count, from pytest's own report (junit testsuite attributes).
skips=$("$BIN/python" -c '
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("unknown"); raise SystemExit
# an xfail is reported as <skipped type="pytest.xfail">: not a skip
print(sum(1 for s in root.iter("skipped") if s.get("type") != "pytest.xfail"))
' "$JUNIT")
printf 'test: %s skipped\n' "$skips"
case "${ROCMENV_REQUIRE_ENGINE:-}" in
  1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss])
    [ "$skips" = 0 ] || failed+=("skips ($skips skipped under ROCMENV_REQUIRE_ENGINE)") ;;
esac
run_check "ruff check" "$BIN/ruff" check .
run_check "ruff format" "$BIN/ruff" format --check .
run_check mypy "$BIN/mypy"

if [ ${#failed[@]} -gt 0 ]; then
  printf 'test: FAILED: %s\n' "${failed[*]}" >&2
  exit 1
fi
echo "test: all checks passed"
