#!/usr/bin/env bash
# scripts/test.sh [PYTEST ARGS...] — the project's test command (README, Makefile, CI).
#
# Runs scripts/setup.sh (idempotent: seconds when the environment is up), then
# pytest (default: the whole tests/ tree, and tests/unit once more in the venv of every
# other Python pyproject.toml claims, .venv-3.X), ruff check, ruff format --check and mypy
# (these and the other Pythons' unit runs in the background beside the serial part).
# Every check runs even when an earlier one fails; the exit status is non-zero if any failed.
#
#   ROCMENV_REQUIRE_ENGINE=1   every skip is a failure (a missing engine, registry, git,
#                              system Python, tool …); the skip count printed at the end must
#                              be 0 or the run fails (.ci/run sets it)
#   ROCMENV_SKIP_SETUP=1       do not run scripts/setup.sh (environment already up, not root)
#   ROCMENV_TEST_WORKERS=N     pytest-xdist workers for the whole-suite run (default: cores + 1;
#                              1: one process). With PYTEST ARGS, one process runs exactly them.
#   ROCMENV_TEST_USER=NAME     the ordinary user the permission-sensitive tests run as a second
#                              time, when the whole suite runs as root (default rocmenv-test)
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

JUNIT_DIR="$(mktemp -d "${TMPDIR:-/tmp}/rocmenv-junit.XXXXXX")"
trap 'rm -rf "$JUNIT_DIR"' EXIT

as_user() { # USER WORKERS: the as_user tests as USER (parallel part, then serial), see below
  local user=$1 workers=$2 home out
  if ! home=$(getent passwd "$user" | cut -d: -f6) || [ -z "$home" ]; then
    failed+=("pytest as $user: no such user (scripts/setup.sh creates it)")
    return
  fi
  out="$JUNIT_DIR/$user" && mkdir -p "$out" && chown "$user" "$out" && chmod 711 "$JUNIT_DIR"
  local run=(runuser -u "$user" -- env HOME="$home" "$BIN/pytest" -p no:cacheprovider)
  # `slow` (the twenty interrupted runs of test_signals.py, a race hunt) runs as root only:
  # the ordinary user's path of each signal case is the single runs beside it
  run_check "pytest as $user (parallel)" "${run[@]}" -n "$workers" \
    -m "as_user and not root_only and not serial and not soak and not slow" \
    --junitxml="$out/as-user-parallel.xml" tests/
  run_check "pytest as $user (serial)" "${run[@]}" \
    -m "as_user and not root_only and serial and not soak" --junitxml="$out/as-user-serial.xml" tests/
  cp "$out"/*.xml "$JUNIT_DIR"/ 2>/dev/null # counted with the others' skips
}
# The unit tests on every other Python the package claims (pyproject's classifiers; the
# venvs are scripts/setup.sh's): the host side runs where pyproject says it does. They need
# neither the engine nor the Slurm cluster, so they run in the background beside the serial
# part (which mostly waits on them); other_pythons_report prints each run and counts it.
# A claimed Python without its venv is a failure under ROCMENV_REQUIRE_ENGINE (CI).
other_pythons() { # WORKERS: each other claimed Python's tests/unit, one after another
  local main_py v
  main_py=$("$BIN/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  for v in $("$BIN/python" tests/support/pythons.py claimed); do
    [ "$v" = "$main_py" ] && continue
    if [ -x "$REPO/.venv-$v/bin/pytest" ]; then
      "$REPO/.venv-$v/bin/pytest" -p no:cacheprovider -n "$1" -m "not serial and not soak" \
        --junitxml="$JUNIT_DIR/unit-$v.xml" tests/unit >"$PY_DIR/$v.log" 2>&1
      echo $? >"$PY_DIR/$v.rc"
    else
      echo missing >"$PY_DIR/$v.rc"
    fi
  done
}
other_pythons_report() {
  local rc v
  for rc in "$PY_DIR"/*.rc; do
    [ -e "$rc" ] || continue
    v=$(basename "$rc" .rc)
    if [ "$(cat "$rc")" = missing ]; then
      case "${ROCMENV_REQUIRE_ENGINE:-}" in
        1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss]) failed+=("Python $v (claimed): no $REPO/.venv-$v") ;;
        *) printf 'test: warning: Python %s is claimed but %s is missing (scripts/setup.sh)\n' \
          "$v" "$REPO/.venv-$v" >&2 ;;
      esac
      continue
    fi
    printf '== pytest tests/unit (Python %s)\n' "$v"
    tail -n 40 "$PY_DIR/$v.log"
    [ "$(cat "$rc")" = 0 ] || failed+=("pytest tests/unit (Python $v)")
  done
}
PY_DIR="$JUNIT_DIR/pythons" && mkdir -p "$PY_DIR"
# ruff check, ruff format --check and mypy: CPU only, so with the whole suite they run in the
# background beside the serial part too; static_report prints them in order and counts them
STATIC_CHECKS=("ruff check" "ruff format" mypy)
static_checks() { # each check's output and status into $STATIC_DIR/N.{log,rc}, in that order
  static_check 0 "$BIN/ruff" check .
  static_check 1 "$BIN/ruff" format --check .
  static_check 2 "$BIN/mypy"
}
static_check() { # N CMD...
  local n=$1
  shift
  "$@" >"$STATIC_DIR/$n.log" 2>&1
  echo $? >"$STATIC_DIR/$n.rc"
}
static_report() {
  local i=0 name
  for name in "${STATIC_CHECKS[@]}"; do
    printf '== %s\n' "$name"
    cat "$STATIC_DIR/$i.log" 2>/dev/null
    [ "$(cat "$STATIC_DIR/$i.rc" 2>/dev/null)" = 0 ] || failed+=("$name")
    i=$((i + 1))
  done
}
STATIC_DIR="$JUNIT_DIR/static" && mkdir -p "$STATIC_DIR"

if [ $# -eq 0 ]; then
  # The whole suite in two parts: everything that shares nothing on pytest-xdist workers
  # (most tests wait on the engine, not the CPU), then the `serial` tests alone (gc sweeps
  # engine-wide, the one Slurm cluster). Soaks stay out (-m soak; `make soak`).
  workers="${ROCMENV_TEST_WORKERS:-$(($(nproc) + 1))}"
  if [ "$workers" -gt 1 ]; then
    run_check "pytest (parallel, $workers workers)" "$BIN/pytest" -n "$workers" \
      -m "not serial and not soak" --junitxml="$JUNIT_DIR/parallel.xml" tests/
    other_pythons "$workers" &
    pythons=$!
    static_checks &
    static=$!
    run_check "pytest (serial)" "$BIN/pytest" -m "serial and not soak" \
      --junitxml="$JUNIT_DIR/serial.xml" tests/
    wait "$pythons" "$static"
  else
    run_check pytest "$BIN/pytest" --junitxml="$JUNIT_DIR/all.xml" tests/
    other_pythons "$workers"
    static_checks
  fi
  other_pythons_report
  # The permission-sensitive tests (tests/conftest.py: AS_USER) once more as an ordinary
  # user, so the paths root never takes (EPERM from another user's process, a file it may not
  # open, the engine through the docker group) are exercised. scripts/setup.sh makes the user;
  # set-ups only root can make are marked root_only (with the reason) and left out.
  if [ "$(id -u)" = 0 ]; then
    as_user "${ROCMENV_TEST_USER:-rocmenv-test}" "$workers"
  fi
else
  run_check pytest "$BIN/pytest" --junitxml="$JUNIT_DIR/args.xml" "$@"
  static_checks
fi
# The skip count, from pytest's own reports (junit testsuite attributes).
skips=$("$BIN/python" -c '
import sys, xml.etree.ElementTree as ET
total = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        print("unknown"); raise SystemExit
    # an xfail is reported as <skipped type="pytest.xfail">: not a skip
    total += sum(1 for s in root.iter("skipped") if s.get("type") != "pytest.xfail")
print(total)
' "$JUNIT_DIR"/*.xml)
printf 'test: %s skipped\n' "$skips"
case "${ROCMENV_REQUIRE_ENGINE:-}" in
  1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss])
    [ "$skips" = 0 ] || failed+=("skips ($skips skipped under ROCMENV_REQUIRE_ENGINE)") ;;
esac
static_report

if [ ${#failed[@]} -gt 0 ]; then
  printf 'test: FAILED: %s\n' "${failed[*]}" >&2
  exit 1
fi
echo "test: all checks passed"
