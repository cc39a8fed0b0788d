#!/usr/bin/env bash
# scripts/under-load.sh [-n N] CMD [ARGS...] — run CMD with N (default 3) CPU-bound processes
# beside it, as on a busy shared runner, and always stop them afterwards.
#
#   scripts/under-load.sh .ci/run                 # the whole CI under load (issue 18)
#   scripts/under-load.sh .venv/bin/pytest -q tests/integration/run/test_signals.py
#
# The busy processes spin at normal priority. They stop when CMD ends, when this script is
# interrupted (SIGINT/SIGTERM/SIGHUP, forwarded to CMD first) and, should this script be
# killed outright (SIGKILL), by themselves: each checks every few milliseconds that this
# script is still alive. CMD keeps this script's stdin, stdout and stderr.
# Exit status: CMD's (128+N when this script was stopped by signal N).
set -uo pipefail

count=3
if [ "${1:-}" = "-n" ]; then
  count=${2:?under-load: -n needs a number}
  shift 2
fi
case "$count" in '' | *[!0-9]*) echo "under-load: -n takes a number, not '$count'" >&2; exit 2 ;; esac
if [ $# -eq 0 ]; then
  echo "usage: scripts/under-load.sh [-n N] CMD [ARGS...]" >&2
  exit 2
fi

me=$$
busy=()
spin() { # a CPU-bound loop that ends by itself once this script is gone
  while kill -0 "$me" 2>/dev/null; do
    i=0
    while [ $i -lt 20000 ]; do i=$((i + 1)); done
  done
}
stop_busy() {
  if [ ${#busy[@]} -gt 0 ]; then
    kill "${busy[@]}" 2>/dev/null
    wait "${busy[@]}" 2>/dev/null
    busy=()
  fi
}
cmd_pid=""
on_signal() { # SIGNAL_NAME CODE
  trap - INT TERM HUP
  if [ -n "$cmd_pid" ]; then
    kill "-$1" "$cmd_pid" 2>/dev/null
    wait "$cmd_pid" 2>/dev/null
  fi
  stop_busy
  exit "$2"
}
trap stop_busy EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

for _ in $(seq "$count"); do
  spin &
  busy+=($!)
done
echo "under-load: $count CPU-bound processes beside: $*" >&2

# In the background (so a signal reaches the traps at once), stdin kept explicitly, and with
# SIGINT/SIGQUIT restored: bash ignores them in background commands, and a program that
# starts with SIGINT ignored keeps ignoring it (Python does) — interrupt tests would lie.
( trap - INT QUIT; exec "$@" ) <&0 &
cmd_pid=$!
wait "$cmd_pid"
status=$?
cmd_pid=""
stop_busy
echo "under-load: '$1' exited $status (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
exit "$status"
