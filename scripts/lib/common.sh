# shellcheck shell=bash
# Helpers shared by scripts/setup.sh and scripts/test.sh (sourced, not executed).

_t0_step=0
_t0_all=$(date +%s.%N)
declare -a _timings=()

log() { printf '%s\n' "$*"; }
warn() { printf 'setup: warning: %s\n' "$*" >&2; }
die() {
  printf 'setup: error: %s\n' "$1" >&2
  if [ $# -gt 1 ]; then printf 'hint: %s\n' "$2" >&2; fi
  exit 1
}

_now() { date +%s.%N; }
_since() { awk -v a="$1" -v b="$(_now)" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME: close the previous step's timer, open a new one
_step_name=""
step() {
  step_end
  _step_name="$1"
  _t0_step=$(_now)
  printf '== %s\n' "$1"
}
step_end() {
  if [ -n "$_step_name" ]; then
    _timings+=("$(printf '%-22s %6s s' "$_step_name" "$(_since "$_t0_step")")")
    _step_name=""
  fi
}
print_timings() {
  step_end
  local t
  for t in "${_timings[@]}"; do printf '  %s\n' "$t"; done
  printf '  %-22s %6s s\n' "total" "$(_since "$_t0_all")"
}

# wait_until SECONDS CMD...: run CMD every 0.2 s until it succeeds or time runs out
wait_until() {
  local limit=$1
  shift
  local deadline
  deadline=$(awk -v n="$(_now)" -v l="$limit" 'BEGIN { printf "%.0f", n + l }')
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then return 1; fi
    sleep 0.2
  done
}

# http_code URL: the HTTP status of a GET (000 when nothing answers)
http_code() { curl -s -o /dev/null -m 3 -w '%{http_code}' "$1" || true; }

# http_answers URL CODE...: the GET status is one of CODE...
http_answers() {
  local url=$1 code
  shift
  code=$(http_code "$url")
  local want
  for want in "$@"; do [ "$code" = "$want" ] && return 0; done
  return 1
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
read_pid() { if [ -f "$1" ]; then cat "$1"; fi; }

# stop_pid PIDFILE: TERM the process named in PIDFILE (bounded), then KILL
stop_pid() {
  local pid
  pid=$(read_pid "$1")
  if pid_alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    local _
    for _ in $(seq 1 50); do
      pid_alive "$pid" || break
      sleep 0.1
    done
    if pid_alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}

# who_listens PORT: the process listening on 127.0.0.1:PORT, for error messages
who_listens() { ss -Hltnp "sport = :$1" 2>/dev/null | sed 's/^/    /' || true; }
