#!/usr/bin/env bash
# The run step of the composite action (action.yml): its inputs arrive as INPUT_* variables
# and become one rocmenv command line. Tested by tests/unit/test_action.py.
set -euo pipefail

argv=()
suite_args() {
  [ -n "$INPUT_SUITE" ] || { echo "::error title=rocmenv::input 'suite' is required for $INPUT_COMMAND"; exit 2; }
  argv+=("$INPUT_SUITE" --cadence "${INPUT_CADENCE:-regular}")
  # the PR's label names as they are: the project's [labels] policy reads them
  if [ -n "$INPUT_LABELS" ]; then argv+=(--labels "$INPUT_LABELS"); fi
  if [ -n "$INPUT_PROFILE" ]; then argv+=(--profile "$INPUT_PROFILE"); fi
}

case "$INPUT_COMMAND" in
  suite-run)
    argv=(suite run)
    suite_args
    if [ -n "$INPUT_PARTITION" ]; then argv+=(--partition "$INPUT_PARTITION" --declared); fi
    if [ -n "$INPUT_JUNIT" ]; then argv+=(--junit "$INPUT_JUNIT"); fi
    ;;
  suite-plan)
    argv=(suite plan)
    suite_args
    argv+=(--format gha-matrix --declared)
    if [ -n "$INPUT_PARTITIONS" ]; then argv+=(--partitions "$INPUT_PARTITIONS"); fi
    if [ -n "$INPUT_MAX_PARTITION_TIME" ]; then argv+=(--max-partition-time "$INPUT_MAX_PARTITION_TIME"); fi
    ;;
  suite-list)
    argv=(suite list)
    suite_args
    ;;
  pin)
    argv=(pin)
    if [ -n "$INPUT_PROFILE" ]; then argv+=(--profile "$INPUT_PROFILE"); fi
    ;;
  resolve)
    argv=(resolve --digest)
    if [ -n "$INPUT_PROFILE" ]; then argv+=(--profile "$INPUT_PROFILE"); fi
    ;;
  init)
    argv=(init)
    ;;
  *)
    echo "::error title=rocmenv::unknown command '$INPUT_COMMAND' (suite-run, suite-plan, suite-list, pin, resolve, init)"
    exit 2
    ;;
esac

case "${INPUT_UNTRUSTED,,}" in
  true | 1 | yes)
    export ROCMENV_UNTRUSTED=1
    case "$INPUT_COMMAND" in suite-run) argv+=(--untrusted) ;; esac
    ;;
  false | 0 | no | "") ;;
  *)
    echo "::error title=rocmenv::input 'untrusted' must be true or false, not '$INPUT_UNTRUSTED'"
    exit 2
    ;;
esac

if [ -n "$INPUT_ARGS" ]; then
  read -r -a extra <<< "$INPUT_ARGS"
  argv+=("${extra[@]}")
fi

echo "rocmenv ${argv[*]}"
# The action's own interpreter in isolated mode (-I): PYTHONPATH and the like that the step
# sets for the tests (the profile's pass-env) reach the containers, never rocmenv's imports.
python="${RUNNER_TEMP:-}/rocmenv-venv/bin/python"
if [ -n "${RUNNER_TEMP:-}" ] && [ -x "$python" ]; then
  exec "$python" -I -m rocmenv "${argv[@]}"
fi
exec rocmenv "${argv[@]}"
