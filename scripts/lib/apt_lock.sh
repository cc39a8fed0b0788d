# shellcheck shell=bash
# Wait (bounded) for another apt or dpkg to finish, instead of failing with apt's exit 100.
# Sourced by scripts/setup.sh (after scripts/lib/common.sh), before it runs apt-get.
#
# The first boot of a cloud VM runs unattended-upgrades (or cloud-init's apt); apt-get then
# fails at once: "Could not get lock /var/lib/dpkg/lock-frontend. It is held by process …".
# apt's own `-o DPkg::Lock::Timeout=N` waits for the dpkg locks only, not for `apt-get
# update`'s /var/lib/apt/lists/lock; so every lock apt takes is waited for here (the holder
# found by lslocks, util-linux: POSIX record locks as apt and dpkg take them, and flock(2)
# locks), logged every 30 s with the holder's pid and command, and DPkg::Lock::Timeout is
# still passed to apt-get for the moment between this check and its own.
#
#   ROCMENV_APT_LOCK_WAIT  seconds to wait at most (default 600)
#   ROCMENV_APT_LOCKS      the lock files (default: apt's four; the tests point it elsewhere)

APT_LOCK_FILES="${ROCMENV_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}"

# apt_lock_holder: "PID (COMMAND) holds PATH" for the first lock file held, or nothing
apt_lock_holder() {
  command -v lslocks >/dev/null 2>&1 || return 0
  local locks path pid comm
  locks=$(lslocks --noheadings --raw --output PID,PATH 2>/dev/null) || return 0
  for path in $APT_LOCK_FILES; do
    pid=$(awk -v p="$path" '$2 == p { print $1; exit }' <<<"$locks")
    if [ -n "$pid" ] && [ "$pid" != "$$" ]; then
      comm=$(cat "/proc/$pid/comm" 2>/dev/null || echo "?")
      printf '%s (%s) holds %s\n' "$pid" "$comm" "$path"
      return 0
    fi
  done
}

# wait_for_apt_locks: returns once no apt lock is held; dies after ROCMENV_APT_LOCK_WAIT s
wait_for_apt_locks() {
  local limit=${ROCMENV_APT_LOCK_WAIT:-600} start now holder last=-30
  # whole seconds since the start, from microseconds (EPOCHREALTIME, bash 5): `date +%s`
  # would round the start down and give up as much as a second before the bound
  start=${EPOCHREALTIME//[!0-9]/}
  while holder=$(apt_lock_holder) && [ -n "$holder" ]; do
    now=${EPOCHREALTIME//[!0-9]/}
    now=$(((now - start) / 1000000))
    if [ "$now" -ge "$limit" ]; then
      die "another package manager still runs after ${limit} s: $holder" \
        "wait for it (first boot: unattended-upgrades) and re-run, or set ROCMENV_APT_LOCK_WAIT"
    fi
    if [ $((now - last)) -ge 30 ]; then
      log "  waiting for apt/dpkg: $holder (up to ${limit} s; ${now} s so far)"
      last=$now
    fi
    sleep 1
  done
  return 0
}
