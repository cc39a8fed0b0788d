#!/usr/bin/env bash
# scripts/setup.sh — set up (or refresh) rocmenv's test environment of real parts.
#
# Idempotent; run as root on Debian 12. First run on a fresh machine: a few minutes
# (apt, three debootstraps, image builds); a re-run reuses everything and takes seconds.
#
#   1. apt: docker.io docker-registry debootstrap skopeo git python3-venv ca-certificates curl
#   2. .venv with `pip install -e . --group dev` (re-installed when pyproject.toml changes),
#      and a venv per other Python the package claims (.venv-3.X, `--group test`: the unit
#      tests run in each; tests/support/pythons.py finds the interpreters on PATH or pyenv)
#   3. dockerd (started with setsid when /var/run/docker.sock does not answer)
#   4. services, each started with setsid, pid file under $STATE/run, log under $STATE/logs:
#        open registry   127.0.0.1:5000  Distribution, no auth
#        auth registry   127.0.0.1:5001  Distribution, token auth (realm 127.0.0.1:5002)
#        token server    127.0.0.1:5002  tests/support/token_server.py (user ci-bot)
#        TLS "Docker Hub" 127.0.0.1:5443 + tinyproxy 127.0.0.1:8888 (scripts/lib/registry_tls.sh)
#   5. base images rocmenv-test/base:py39|py311|py313 from debootstrap trees cached in
#      $ROCMENV_BASES_CACHE (bullseye, bookworm, trixie)
#   6. the test image family of images/family.toml, built and pushed to 127.0.0.1:5000
#   7. the ~3000-tag set of tests/support/tagset.py on 127.0.0.1:5000/rocm/sgl-dev, and a
#      few tags on the auth registry
#   8. the ordinary user scripts/test.sh runs the permission-sensitive tests as
#      (ROCMENV_TEST_USER, default rocmenv-test; in the docker group)
#
# Environment:
#   ROCMENV_TESTENV_STATE   state dir (default /var/lib/rocmenv-testenv)
#   ROCMENV_BASES_CACHE     debootstrap tree cache (default /var/cache/rocmenv-bases)
#   ROCMENV_DEBIAN_MIRROR   Debian mirror (default http://deb.debian.org/debian)
#   ROCMENV_SETUP_SKIP_APT=1  do not touch apt even when packages are missing
#   ROCMENV_APT_LOCK_WAIT   seconds to wait for another apt/dpkg to finish (default 600)
#   ROCMENV_TEST_USER       the ordinary test user (default rocmenv-test)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=scripts/lib/apt_lock.sh
. "$REPO/scripts/lib/apt_lock.sh"

STATE="${ROCMENV_TESTENV_STATE:-/var/lib/rocmenv-testenv}"
BASES_CACHE="${ROCMENV_BASES_CACHE:-/var/cache/rocmenv-bases}"
MIRROR="${ROCMENV_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ARCHIVE_MIRROR="http://archive.debian.org/debian"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
# gpgv + debian-archive-keyring: debootstrap verifies the Release files (only Recommends);
# tmux: the tests read the pull display and the shell off a real terminal's screen;
# acl: setfacl gives the ordinary test user the way to the checkout and the venv's Python;
# zstd: the tarball-cache baseline of benchmarks/bench_image_cache.py; pigz: dockerd unpacks
# gzip layers with unpigz when it is on PATH (pulls and loads, with and without the cache)
APT_PACKAGES=(docker.io docker-registry debootstrap skopeo git python3-venv ca-certificates curl
  gpgv debian-archive-keyring shellcheck tinyproxy openssl tmux acl zstd pigz)
export ROCMENV_TESTENV_STATE="$STATE"

[ "$(id -u)" = 0 ] || die "scripts/setup.sh must run as root (it installs packages and starts dockerd)" \
  "run it with sudo, or as root in the CI container"
mkdir -p "$STATE"/logs "$STATE"/run "$BASES_CACHE"

# One setup at a time (several engineers/CI steps may call scripts/test.sh at once).
exec 9>"$STATE/setup.lock"
if ! flock -n 9; then
  log "setup: another scripts/setup.sh is running; waiting for it (up to 15 min)"
  flock -w 900 9 || die "timed out waiting for $STATE/setup.lock" "is a setup.sh stuck? see $STATE/logs"
fi

# --------------------------------------------------------------------------- 1. apt

ensure_apt() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "  all packages present"
    return 0
  fi
  [ "${ROCMENV_SETUP_SKIP_APT:-}" = 1 ] && die "missing packages: ${missing[*]}" "unset ROCMENV_SETUP_SKIP_APT"
  log "  installing: ${missing[*]}"
  # Keep package scripts from starting services (Debian's docker-registry would take :5000
  # with its own config); this script starts what it needs itself.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # another apt (first boot: unattended-upgrades) is waited for, bounded (scripts/lib/apt_lock.sh)
  wait_for_apt_locks
  local wait=(-o "DPkg::Lock::Timeout=${ROCMENV_APT_LOCK_WAIT:-600}")
  if ! { apt-get "${wait[@]}" update -qq &&
    apt-get "${wait[@]}" install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$STATE/logs/apt.log" 2>&1; then
    [ $own_policy = 1 ] && rm -f "$policy"
    tail -n 20 "$STATE/logs/apt.log" >&2
    die "apt-get install failed (log: $STATE/logs/apt.log)" "check the Debian mirror is reachable"
  fi
  [ $own_policy = 1 ] && rm -f "$policy"
  return 0
}

disable_distro_registry() {
  # Debian's docker-registry unit listens on :5000 with htpasswd auth: not ours.
  if [ -d /run/systemd/system ] && systemctl is-active --quiet docker-registry 2>/dev/null; then
    log "  stopping Debian's docker-registry service (it holds :5000)"
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
}

# --------------------------------------------------------------------------- 2. venv

pick_python() {
  local c
  for c in python3.11 python3; do
    if command -v "$c" >/dev/null 2>&1 &&
      "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}

ensure_venv() { # [VENV BASE GROUP]: default .venv, pick_python, dev
  local venv=${1:-$VENV} base=${2:-} group=${3:-dev}
  local py="$venv/bin/python" stamp="$venv/.rocmenv-setup-stamp" want
  if [ -x "$py" ] && ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
    warn "$venv is broken or older than Python 3.10: recreating it"
    rm -rf "$venv"
  fi
  if [ ! -x "$py" ]; then
    [ -n "$base" ] || base=$(pick_python) || die "no python3.11 or python3 >= 3.10 found" "apt-get install python3 python3-venv"
    log "  creating $venv with $base"
    "$base" -m venv "$venv" || die "python -m venv failed" "apt-get install python3-venv"
  fi
  want=$(cat "$REPO/pyproject.toml" <("$py" -VV) | sha256sum | cut -c1-64)
  if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    log "  $venv up to date ($("$py" -V))"
    return 0
  fi
  # `--group` (PEP 735 dependency groups) needs pip >= 25.1; venvs start with their Python's
  log "  pip install -e . --group $group into $venv (pyproject.toml changed or first run)"
  if ! (cd "$REPO" &&
    { "$py" -c 'import pip, sys; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (25, 1))' ||
      "$py" -m pip install -q --disable-pip-version-check 'pip>=25.1'; } &&
    "$py" -m pip install -q --disable-pip-version-check -e . --group "$group") \
    >"$STATE/logs/pip-${venv##*/}.log" 2>&1; then
    tail -n 20 "$STATE/logs/pip-${venv##*/}.log" >&2
    die "pip install -e . --group $group failed (log: $STATE/logs/pip-${venv##*/}.log)" "check PyPI is reachable"
  fi
  printf '%s\n' "$want" >"$stamp"
}

# Every other Python the package claims (pyproject's classifiers) gets a venv of its own for
# the unit tests (scripts/test.sh). A claimed Python not on this machine is a warning here
# and a failure in CI (scripts/test.sh under ROCMENV_REQUIRE_ENGINE=1).
ensure_claimed_venvs() {
  local v base main
  main=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  for v in $("$PY" "$REPO/tests/support/pythons.py" claimed); do
    [ "$v" = "$main" ] && continue
    if ! base=$("$PY" "$REPO/tests/support/pythons.py" find "$v"); then
      warn "no Python $v (claimed by pyproject.toml) on PATH or under pyenv: its unit tests cannot run"
      continue
    fi
    ensure_venv "$REPO/.venv-$v" "$base" test
  done
}

# --------------------------------------------------------------------------- 3. dockerd

ensure_dockerd() {
  if docker info >/dev/null 2>&1; then
    log "  engine answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
    return 0
  fi
  if [ -d /run/systemd/system ]; then
    log "  systemctl start docker"
    systemctl start docker || true
  else
    log "  starting dockerd (log: $STATE/logs/dockerd.log)"
    setsid dockerd >"$STATE/logs/dockerd.log" 2>&1 </dev/null 9>&- &
    echo $! >"$STATE/run/dockerd.pid"
  fi
  if ! wait_until 60 docker info; then
    tail -n 20 "$STATE/logs/dockerd.log" >&2 2>/dev/null || true
    die "dockerd did not answer on /var/run/docker.sock within 60 s (log: $STATE/logs/dockerd.log)" \
      "look at the log above; is another dockerd or containerd half-running?"
  fi
}

# --------------------------------------------------------------------------- 4. services

write_if_changed() { # FILE CONTENT -> returns 0 when the file changed
  if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then return 1; fi
  printf '%s\n' "$2" >"$1.tmp" && mv "$1.tmp" "$1"
  return 0
}

registry_config() { # NAME ADDR [auth]
  local name=$1 addr=$2 auth=${3:-}
  cat <<EOF
# written by scripts/setup.sh — do not edit
version: 0.1
log:
  level: info
  formatter: text
  fields:
    service: rocmenv-test-registry-$name
storage:
  filesystem:
    rootdirectory: $STATE/registry-$name/storage
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $addr
  secret: rocmenv-test-$name
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: false
EOF
  if [ "$auth" = auth ]; then
    cat <<EOF
auth:
  token:
    realm: $TE_TOKEN_REALM
    service: $TE_TOKEN_SERVICE
    issuer: $TE_TOKEN_ISSUER
    rootcertbundle: $STATE/token/cert.pem
EOF
  fi
}

# start_service NAME HEALTH_URL "CODES" FINGERPRINT CMD...: (re)start unless running with
# the same fingerprint and healthy
start_service() {
  local name=$1 url=$2 codes=$3 fingerprint=$4
  shift 4
  local pidfile="$STATE/run/$name.pid" fpfile="$STATE/run/$name.fingerprint" pid port
  pid=$(read_pid "$pidfile")
  # shellcheck disable=SC2086
  if pid_alive "$pid" && [ "$(cat "$fpfile" 2>/dev/null || true)" = "$fingerprint" ] &&
    http_answers "$url" $codes; then
    log "  $name: running (pid $pid)"
    return 0
  fi
  stop_pid "$pidfile"
  port=${url#http://*:}
  port=${port%%/*}
  if [ "$(http_code "$url")" != 000 ]; then
    die "$name: something else already answers on port $port:
$(who_listens "$port")" "stop that process (Debian's unit: systemctl disable --now docker-registry) and re-run"
  fi
  log "  $name: starting (log: $STATE/logs/$name.log)"
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$pidfile"
  printf '%s\n' "$fingerprint" >"$fpfile"
  # shellcheck disable=SC2086
  if ! wait_until 30 http_answers "$url" $codes; then
    tail -n 20 "$STATE/logs/$name.log" >&2 || true
    die "$name did not answer $url within 30 s (log: $STATE/logs/$name.log)" \
      "is port $port taken? $(who_listens "$port" | tr -s ' ')"
  fi
}

ensure_services() {
  mkdir -p "$STATE/token" "$STATE/registry-open/storage" "$STATE/registry-auth/storage"
  "$PY" "$REPO/tests/support/token_server.py" init --dir "$STATE/token" >"$STATE/logs/token-init.log" 2>&1 ||
    { cat "$STATE/logs/token-init.log" >&2; die "token key generation failed"; }
  (umask 077 && "$PY" "$REPO/scripts/lib/testenv_setup.py" users-file >"$STATE/token/users.txt")

  local cfg_open cfg_auth fp
  cfg_open="$STATE/registry-open/config.yml"
  cfg_auth="$STATE/registry-auth/config.yml"
  write_if_changed "$cfg_open" "$(registry_config open "$TE_OPEN_REGISTRY")" || true
  write_if_changed "$cfg_auth" "$(registry_config auth "$TE_AUTH_REGISTRY" auth)" || true

  fp=$(cat "$REPO/tests/support/token_server.py" "$STATE/token/cert.pem" "$STATE/token/users.txt" | sha256sum | cut -c1-16)
  start_service token-server "http://$TE_TOKEN_LISTEN/token?service=$TE_TOKEN_SERVICE" "200" "$fp" \
    "$PY" "$REPO/tests/support/token_server.py" serve --dir "$STATE/token" --listen "$TE_TOKEN_LISTEN" \
    --users-file "$STATE/token/users.txt" --service "$TE_TOKEN_SERVICE" --issuer "$TE_TOKEN_ISSUER"

  fp=$(sha256sum <"$cfg_open" | cut -c1-16)
  start_service registry-open "http://$TE_OPEN_REGISTRY/v2/" "200" "$fp" \
    docker-registry serve "$cfg_open"

  fp=$(cat "$cfg_auth" "$STATE/token/cert.pem" | sha256sum | cut -c1-16)
  start_service registry-auth "http://$TE_AUTH_REGISTRY/v2/" "401" "$fp" \
    docker-registry serve "$cfg_auth"
}

# --------------------------------------------------------------------------- 5. bases

tree_complete() { [ -x "$1/usr/bin/python3" ]; }

suite_mirror() { # SUITE -> a mirror that has it
  if curl -sfI -m 10 "$MIRROR/dists/$1/Release" >/dev/null 2>&1; then
    echo "$MIRROR"
  elif curl -sfI -m 10 "$ARCHIVE_MIRROR/dists/$1/Release" >/dev/null 2>&1; then
    echo "$ARCHIVE_MIRROR"
  else
    echo "$MIRROR"
  fi
}

# debootstrap SUITE into a temp dir, rename on success (a killed run leaves no half tree)
build_tree() {
  local suite=$1 dir="$BASES_CACHE/$1" tmp mirror
  mirror=$(suite_mirror "$suite")
  tmp=$(mktemp -d "$BASES_CACHE/.tmp-$suite.XXXXXX")
  if debootstrap --variant=minbase --include=python3 "$suite" "$tmp" "$mirror" \
    >"$STATE/logs/debootstrap-$suite.log" 2>&1 && tree_complete "$tmp"; then
    rm -rf "$dir"
    mv "$tmp" "$dir"
  else
    rm -rf "$tmp"
    return 1
  fi
}

declare -A TREE_JOBS=()
start_trees() {
  rm -rf "$BASES_CACHE"/.tmp-* # leftovers of killed runs
  local spec suite
  for spec in $TE_BASES; do
    IFS=: read -r _ suite _ <<<"$spec"
    if tree_complete "$BASES_CACHE/$suite"; then
      log "  $suite: cached tree $BASES_CACHE/$suite"
    else
      log "  $suite: debootstrap in the background (log: $STATE/logs/debootstrap-$suite.log)"
      build_tree "$suite" &
      TREE_JOBS[$suite]=$!
    fi
  done
}

wait_trees() {
  local suite failed=()
  for suite in "${!TREE_JOBS[@]}"; do
    wait "${TREE_JOBS[$suite]}" || failed+=("$suite")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    local s
    for s in "${failed[@]}"; do tail -n 15 "$STATE/logs/debootstrap-$s.log" >&2 || true; done
    die "debootstrap failed for: ${failed[*]} (logs: $STATE/logs/debootstrap-*.log)" \
      "check that $MIRROR is reachable, or set ROCMENV_DEBIAN_MIRROR"
  fi
}

import_bases() {
  local spec suite image dir id have
  for spec in $TE_BASES; do
    IFS=: read -r _ suite image <<<"$spec"
    dir="$BASES_CACHE/$suite"
    [ -s "$dir/.rocmenv-tree-id" ] || printf '%s-%s\n' "$suite" "$(date -u +%Y%m%dT%H%M%SZ)" >"$dir/.rocmenv-tree-id"
    id=$(cat "$dir/.rocmenv-tree-id")
    have=$(docker image inspect -f '{{index .Config.Labels "org.rocmenv.test.base-tree"}}' "$image" 2>/dev/null || true)
    if [ "$have" = "$id" ]; then
      log "  $image: up to date ($suite)"
      continue
    fi
    log "  $image: importing $dir"
    tar -C "$dir" --numeric-owner \
      --exclude=./.rocmenv-tree-id --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
      --exclude='./var/cache/apt/*' --exclude='./var/lib/apt/lists/*' \
      --exclude='./usr/share/doc/*' --exclude='./usr/share/man/*' --exclude='./usr/share/locale/*' \
      -c . |
      docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL org.rocmenv.test.base-tree=$id" \
        --change "LABEL org.opencontainers.image.title=$image" \
        - "$image" >/dev/null || die "docker import of $dir failed"
  done
}

# --------------------------------------------------------------------------- test user

# An ordinary user for the permission-sensitive tests: scripts/test.sh runs them a second time
# as this user (runuser), so the paths root never takes (EPERM, a file it may not change) are
# exercised too (issue 34). In the docker group for the engine's socket; nothing else.
TEST_USER="${ROCMENV_TEST_USER:-rocmenv-test}"
ensure_test_user() {
  if ! id -u "$TEST_USER" >/dev/null 2>&1; then
    useradd --create-home --user-group --shell /bin/sh "$TEST_USER" \
      || die "useradd $TEST_USER failed" "create the user by hand, or set ROCMENV_TEST_USER"
  fi
  if getent group docker >/dev/null && ! id -nG "$TEST_USER" | grep -qw docker; then
    usermod -aG docker "$TEST_USER" || die "usermod -aG docker $TEST_USER failed"
  fi
  # The way to the checkout and to the interpreter the venv links to (pyenv's may live
  # under root's own 0700 home): where a directory on the way refuses the user, an ACL
  # gives this one user the right to pass through it (x: not to list nor read it).
  local target dir
  for target in "$REPO" "$(readlink -f "$PY")"; do
    dir=$target
    while [ "$dir" != / ]; do
      dir=$(dirname "$dir")
      if ! runuser -u "$TEST_USER" -- test -x "$dir"; then
        setfacl -m "u:$TEST_USER:x" "$dir" || die "setfacl on $dir failed" "install acl"
      fi
    done
  done
}

# --------------------------------------------------------------------------- main

step "apt packages"
ensure_apt
disable_distro_registry

# constants (ports, names, bases) from tests/support/testenv.py and images/family.toml
SYS_PY=$(pick_python) || die "no python3.11 or python3 >= 3.10 found" "apt-get install python3 python3-venv"
eval "$("$SYS_PY" "$REPO/scripts/lib/testenv_setup.py" shell-env)"

step "debootstrap trees"
start_trees # runs in the background while the next steps go on

step "python venv"
ensure_venv
ensure_claimed_venvs

step "test user"
ensure_test_user

step "docker engine"
ensure_dockerd

step "registries + token server"
ensure_services
. "$REPO/scripts/lib/registry_tls.sh" && ensure_registry_tls # TLS hub + proxy (issue 10)

step "base images"
wait_trees
import_bases

step "image family"
"$PY" "$REPO/scripts/lib/testenv_setup.py" family

step "tag set"
"$PY" "$REPO/scripts/lib/testenv_setup.py" tagset
"$PY" "$REPO/scripts/lib/testenv_setup.py" auth-seed
"$PY" "$REPO/scripts/lib/testenv_setup.py" prune

step "test tools + podman"
# shellcheck source=scripts/lib/test_tools.sh disable=SC2086
. "$REPO/scripts/lib/test_tools.sh" && ensure_test_tools "$TE_OPEN_REGISTRY" $TE_FAMILY_REFS

step "slurm test bed" && . "$REPO/scripts/lib/slurm_setup.sh" && ensure_slurm
step_end
log "== summary"
"$PY" "$REPO/scripts/lib/testenv_setup.py" summary
print_timings
