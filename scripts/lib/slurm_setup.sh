# shellcheck shell=bash
# The Slurm test bed (sourced by scripts/setup.sh, which provides log/die/wait_until/
# pid_alive/read_pid/stop_pid/write_if_changed and $STATE, $REPO, $PY).
#
# One node (this host) with 8 stand-in AMD MI300X GPUs: the fake KFD/DRM tree and mknod'ed
# render nodes of tests/support/fakegpu.py under $STATE/slurm-gpus (so `rocmenv gpus` with
# ROCMENV_SYSFS_ROOT/ROCMENV_DEV_ROOT pointed there and Slurm's gres agree), listed in
# gres.conf in an order that is neither PCI order nor render-minor order. TaskPlugin and
# ProctrackType are cgroup, and cgroup.conf constrains devices on cgroup v1, so a job gets
# EPERM opening a GPU node it was not given. munged runs as munge, slurmctld and slurmd as
# root. Idempotent: configs are rewritten only when they change, daemons restarted only then
# (or when they are not running); a re-run with everything up takes well under a second.

SLURM_ETC=/etc/slurm
SLURM_GPUS="$STATE/slurm-gpus"
# Stand-in render minors in gres.conf order. fakegpu's minors follow probe order
# (renderD128 is PCI index 4), so this order maps to PCI indices 5,2,4,3,7,0,6,1.
SLURM_GRES_ORDER="129 134 128 135 131 132 130 133"

slurm_ensure_packages() {
  local missing=() p
  for p in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "${ROCMENV_SETUP_SKIP_APT:-}" = 1 ] && die "missing packages: ${missing[*]}" "unset ROCMENV_SETUP_SKIP_APT"
  log "  installing: ${missing[*]}"
  local policy=/usr/sbin/policy-rc.d own_policy=0 i
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
  fi
  for i in 1 2 3 4 5 6; do # apt may be locked by another installer for a while
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >>"$STATE/logs/apt-slurm.log" 2>&1; then
      [ $own_policy = 1 ] && rm -f "$policy"
      return 0
    fi
    if [ "$i" = 1 ]; then # a fresh machine may have no package lists yet
      apt-get update -qq >>"$STATE/logs/apt-slurm.log" 2>&1 || true
    else
      sleep 10
    fi
  done
  [ $own_policy = 1 ] && rm -f "$policy"
  tail -n 20 "$STATE/logs/apt-slurm.log" >&2
  die "apt-get install ${missing[*]} failed (log: $STATE/logs/apt-slurm.log)"
}

slurm_stand_in_gpus() {
  local fp
  fp=$(sha256sum <"$REPO/tests/support/fakegpu.py" | cut -c1-16)
  if [ "$(cat "$SLURM_GPUS/.fingerprint" 2>/dev/null || true)" = "$fp" ] && [ -c "$SLURM_GPUS/dev/kfd" ]; then
    return 0
  fi
  (cd "$REPO" && "$PY" -c 'import sys; from pathlib import Path; from tests.support.fakegpu import build_fake_host; build_fake_host(Path(sys.argv[1]), char_devices=True)' "$SLURM_GPUS") ||
    die "could not build the stand-in GPU host in $SLURM_GPUS"
  printf '%s\n' "$fp" >"$SLURM_GPUS/.fingerprint"
}

slurm_conf() { # NODE
  cat <<EOF
# written by scripts/lib/slurm_setup.sh — do not edit
ClusterName=rocmenv-test
SlurmctldHost=$1(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$STATE/logs/slurmctld.log
SlurmdLogFile=$STATE/logs/slurmd.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# SchedulerParameters left at Slurm's defaults (sched_interval=60, bf_interval=30), as on
# real clusters: the benchmarks and tests measure the scheduling latency users get
# the test host has 2 cores; declare 16 so that 8 one-GPU jobs can run at once
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
InactiveLimit=0
MinJobAge=30
NodeName=$1 NodeAddr=127.0.0.1 CPUs=16 RealMemory=1000 Gres=gpu:mi300x:8 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

slurm_gres_conf() {
  local minor
  echo "# written by scripts/lib/slurm_setup.sh — deliberately neither PCI nor minor order"
  for minor in $SLURM_GRES_ORDER; do
    echo "Name=gpu Type=mi300x File=$SLURM_GPUS/dev/dri/renderD$minor"
  done
}

slurm_cgroup_conf() {
  cat <<EOF
# written by scripts/lib/slurm_setup.sh — do not edit
CgroupPlugin=cgroup/v1
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
EOF
}

slurm_start() { # NAME PIDFILE CMD...: start unless running with the current config
  local name=$1 pidfile=$2 restart=$3
  shift 3
  local pid
  pid=$(read_pid "$pidfile")
  # running, and really that daemon (a stale pid file may name a reused pid)
  if pid_alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
    [ "$restart" = 0 ] && return 0
    stop_pid "$pidfile"
  else
    rm -f "$pidfile"
  fi
  log "  $name: starting"
  "$@" >>"$STATE/logs/$name.start.log" 2>&1 </dev/null 9>&- || {
    tail -n 20 "$STATE/logs/$name.start.log" "$STATE/logs/$name.log" >&2 2>/dev/null || true
    die "$name did not start (logs: $STATE/logs/$name.log, $STATE/logs/$name.start.log)"
  }
}

slurm_gpu_step_ok() {
  timeout 20 srun --gres=gpu:mi300x:4 --time=1 env 2>"$STATE/logs/slurm-check.log" | grep -q '^ROCR_VISIBLE_DEVICES='
}

ensure_slurm() {
  slurm_ensure_packages
  slurm_stand_in_gpus
  local node changed=0
  node=$(hostname -s)
  mkdir -p "$SLURM_ETC" /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /run/munge
  write_if_changed "$SLURM_ETC/slurm.conf" "$(slurm_conf "$node")" && changed=1
  write_if_changed "$SLURM_ETC/gres.conf" "$(slurm_gres_conf)" && changed=1
  write_if_changed "$SLURM_ETC/cgroup.conf" "$(slurm_cgroup_conf)" && changed=1
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
  chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
  # --force: a killed munged leaves its socket behind, which it would otherwise refuse
  slurm_start munged /run/munge/munged.pid 0 runuser -u munge -- /usr/sbin/munged --force
  wait_until 10 sh -c 'munge -n | unmunge' || die "munged does not answer (munge -n | unmunge)"
  slurm_start slurmctld /run/slurmctld.pid $changed /usr/sbin/slurmctld
  slurm_start slurmd /run/slurmd.pid $changed /usr/sbin/slurmd
  wait_until 30 sh -c "sinfo -h -N -o '%T' | grep -Eq '^(idle|mixed|allocated)'" || {
    scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    wait_until 20 sh -c "sinfo -h -N -o '%T' | grep -Eq '^(idle|mixed|allocated)'" ||
      die "the Slurm node never became idle: $(sinfo -N 2>&1 | tail -n 1)" "see $STATE/logs/slurmd.log"
  }
  if ! slurm_gpu_step_ok; then
    cat "$STATE/logs/slurm-check.log" >&2
    die "srun --gres=gpu:mi300x:4 env shows no ROCR_VISIBLE_DEVICES" "see $STATE/logs/slurmd.log"
  fi
  log "  slurm: node $node up, 8 stand-in MI300X GPUs (gres.conf order: renderD${SLURM_GRES_ORDER// /,renderD})"
}
