#!/usr/bin/env bash
# Runs ON each TPU VM worker (setup.sh and launch.sh copy it there as ~/tseeds-worker.sh and call it
# through `gcloud compute tpus tpu-vm ssh --worker=all`). Self-contained: lib.sh is not shipped.
#
#   worker.sh install (--wheel FILE|gs://URL | --git-url URL --git-ref REF) [--jax-spec SPEC]
#                     [--venv DIR] [--python BIN]
#   worker.sh verify  --expected-devices N [--venv DIR]
#   worker.sh start   --run-id ID --run-dir gs://... --log-dir gs://... --config FILE
#                     [--attempt NAME] [--run-dir-key KEY] [--venv DIR] [--upload-every SEC]
#                     [--restart]
#                     [-- --config.key=value ...]
#   worker.sh stop    --run-id ID [--grace SEC]   TERM, then KILL after SEC (default 300) s
#   worker.sh status  --run-id ID    prints "running PID" (exit 0) or "not-running" (exit 3)
#
# Environment: TSEEDS_WORKER_ID overrides the worker index (read from the TPU metadata server
# otherwise); TSEEDS_HOME is the state folder (default ~/tseeds-worker).
set -euo pipefail

PROG=tseeds-worker
SELF=$(readlink -f "${BASH_SOURCE[0]}")
STATE_HOME=${TSEEDS_HOME:-$HOME/tseeds-worker}

log() { printf '[%s %s] %s\n' "$PROG" "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$1" >&2; exit "${2:-1}"; }

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$SELF"; }

# The worker index inside the slice: 0..num_workers-1, the same numbering as --worker=N in gcloud.
worker_id() {
  if [[ -n ${TSEEDS_WORKER_ID:-} ]]; then printf '%s' "$TSEEDS_WORKER_ID"; return; fi
  local id
  if id=$(curl -sf --max-time 5 -H 'Metadata-Flavor: Google' \
    http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number) &&
    [[ $id =~ ^[0-9]+$ ]]; then
    printf '%s' "$id"
  else
    hostname
  fi
}

gcs_cp() {
  if command -v gcloud >/dev/null; then
    gcloud storage cp --quiet "$@"
  else
    gsutil -q cp "$@"
  fi
}

gcs_rm() {
  if command -v gcloud >/dev/null; then
    gcloud storage rm --quiet "$@"
  else
    gsutil -q rm "$@"
  fi
}

# Option parsing shared by the sub-commands: sets A[name]; the words after `--` go to EXTRA.
declare -A A=()
EXTRA=()
parse() {
  while (($#)); do
    case $1 in
      --) shift; EXTRA=("$@"); return ;;
      --restart) A[restart]=1; shift ;;
      --*=*) local k=${1%%=*}; A[${k#--}]=${1#*=}; shift ;;
      --*) (($# >= 2)) || die "$1 needs a value" 2; A[${1#--}]=$2; shift 2 ;;
      *) die "unexpected argument '$1'" 2 ;;
    esac
  done
}

need() {
  local name
  for name in "$@"; do [[ -n ${A[$name]:-} ]] || die "--$name is required" 2; done
}

cmd_install() {
  local venv=${A[venv]:-$HOME/tseeds-venv} python=${A[python]:-python3}
  local jax_spec=${A[jax-spec]:-jax[tpu]} project
  if [[ -n ${A[wheel]:-} ]]; then
    project=${A[wheel]}
    if [[ $project == gs://* ]]; then
      mkdir -p "$STATE_HOME/wheels"
      gcs_cp "$project" "$STATE_HOME/wheels/"
      project=$STATE_HOME/wheels/${project##*/}
    fi
    [[ -f $project ]] || die "wheel '$project' not found on $(hostname)"
  elif [[ -n ${A[git-url]:-} && -n ${A[git-ref]:-} ]]; then
    project="tseeds_jax @ git+${A[git-url]}@${A[git-ref]}"
  else
    die "install needs --wheel or --git-url with --git-ref" 2
  fi
  # Ubuntu images ship python3 without ensurepip; the venv package is the documented fix.
  if [[ ! -x $venv/bin/python ]] && ! "$python" -m venv "$venv"; then
    log "python venv unavailable; installing python3-venv"
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    "$python" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # One resolver run for all, so that the project's jax pin and jax[tpu]'s libtpu agree. gcsfs:
  # etils.epath (used by Orbax and the seed-cache files) needs it for gs:// run dirs.
  "$venv/bin/python" -m pip install --quiet "$project" "$jax_spec" "gcsfs==2026.10.1"
  local versions
  versions=$("$venv/bin/python" -c \
    'import jax, tseeds_jax; print("jax", jax.__version__, "tseeds_jax", tseeds_jax.__file__)')
  log "installed on worker $(worker_id): $versions"
}

# All workers run this at the same time (ssh --worker=all), which multi-host JAX needs: the TPU
# runtime joins every host of the slice before it reports the global device count.
VERIFY_PY='
import sys
import jax
expected = int(sys.argv[1])
n = jax.device_count()
print(f"tseeds verify: process_index={jax.process_index()} process_count={jax.process_count()} "
      f"local_devices={jax.local_device_count()} devices={n} kind={jax.devices()[0].device_kind}",
      flush=True)
assert n == expected, f"expected {expected} devices, JAX sees {n}"
'

cmd_verify() {
  need expected-devices
  local venv=${A[venv]:-$HOME/tseeds-venv}
  "$venv/bin/python" -c "$VERIFY_PY" "${A[expected-devices]}"
}

run_state_dir() { printf '%s/runs/%s' "$STATE_HOME" "$1"; }

alive_pid() {  # prints the pid of a live run, if any
  local pidfile=$1/pid pid
  [[ -f $pidfile ]] || return 1
  pid=$(<"$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && printf '%s' "$pid"
}

cmd_stop() {
  need run-id
  local dir pid i
  dir=$(run_state_dir "${A[run-id]}")
  pid=$(alive_pid "$dir") || { log "run ${A[run-id]} is not running here"; return 0; }
  # TERM to the runner only: it forwards TERM to the trainer, which finishes its step, writes a
  # checkpoint and exits 75 (resume); the runner still uploads the log. The grace period must
  # cover one step plus one checkpoint write.
  local grace=${A[grace]:-300}
  [[ $grace =~ ^[0-9]+$ ]] || die "--grace '$grace': a number of seconds" 2
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace; i++)); do
    kill -0 "$pid" 2>/dev/null || { log "stopped run ${A[run-id]} (pid $pid)"; return 0; }
    sleep 1
  done
  log "run ${A[run-id]} (pid $pid) ignored TERM for $grace s; killing its process group"
  kill -KILL -- "-$pid" 2>/dev/null || true
}

cmd_status() {
  need run-id
  local pid
  if pid=$(alive_pid "$(run_state_dir "${A[run-id]}")"); then
    printf 'running %s\n' "$pid"
    return 0
  fi
  printf 'not-running\n'
  return 3
}

cmd_start() {
  need run-id run-dir log-dir config
  local id=${A[run-id]} dir wid pid
  dir=$(run_state_dir "$id")
  wid=$(worker_id)
  mkdir -p "$dir"
  # ml_collections accepts FILE:ARGS; only FILE has to exist.
  local config_file=${A[config]%%:*} config_arg=
  [[ ${A[config]} == *:* ]] && config_arg=:${A[config]#*:}
  [[ -f $config_file ]] || die "config file '$config_file' not found on worker $wid"
  if pid=$(alive_pid "$dir"); then
    [[ -n ${A[restart]:-} ]] ||
      die "run $id is already running on worker $wid (pid $pid); pass --restart"
    cmd_stop
  fi
  # A stale exit code from an earlier attempt would tell babysit.sh that this attempt finished.
  rm -f "$dir/exitcode"
  gcs_rm "${A[log-dir]}/worker-$wid.exitcode" >/dev/null 2>&1 || true
  local attempt=${A[attempt]:-$(date -u +%Y%m%dT%H%M%SZ)}
  local -a runner=(--run-id "$id" --run-dir "${A[run-dir]}" --log-dir "${A[log-dir]}"
    --config "$(readlink -f "$config_file")$config_arg" --run-dir-key "${A[run-dir-key]:-run_dir}"
    --venv "${A[venv]:-$HOME/tseeds-venv}" --upload-every "${A[upload-every]:-60}"
    --attempt "$attempt" --worker-id "$wid" -- "${EXTRA[@]}")
  # setsid: own process group (stop can reach the trainer); nohup + closed stdio: ssh returns now.
  setsid nohup bash "$SELF" _run "${runner[@]}" </dev/null >>"$dir/runner.out" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$dir/pid"
  log "worker $wid: started run $id (pid $pid), log ${A[log-dir]}/$attempt/worker-$wid.log"
}

# Whether the kernel's OOM killer killed process $1: the kernel log names it ("Out of memory:
# Killed process PID (...)" or "oom-kill:...,pid=PID,..."). Reads journalctl, dmesg or `sudo -n
# dmesg`, whichever this user may; TSEEDS_KERNEL_LOG (tests) names a file that stands in for it.
oom_killed() {
  local pid=$1 text
  if [[ -n ${TSEEDS_KERNEL_LOG:-} ]]; then
    text=$(cat "$TSEEDS_KERNEL_LOG" 2>/dev/null) || true
  else
    text=$({ journalctl -k -q --no-pager --since=-6h; dmesg; sudo -n dmesg; } 2>/dev/null) || true
  fi
  grep -Eq "(Killed process ${pid}[^0-9]|oom-kill:.*[,:]pid=${pid}[^0-9])" <<<"$text"
}

# Why `tseeds train` (pid $2) exited with code $1, in one word (rl/run/preemption.py's exit codes):
# finished, preempted (75: checkpointed on SIGTERM / a notice), interrupted (130: Ctrl-C),
# terminated (143: TERM before its handler ran), oom-killer or killed (137: SIGKILL), error.
exit_reason() {
  case $1 in
    0) printf 'finished' ;;
    75) printf 'preempted' ;;
    130) printf 'interrupted' ;;
    143) printf 'terminated' ;;
    137) if oom_killed "$2"; then printf 'oom-killer'; else printf 'killed'; fi ;;
    *) printf 'error' ;;
  esac
}

# The background runner: trainer with stdout+stderr in a per-worker log, uploaded every N seconds
# and once more at exit, followed by an exit-code file that babysit.sh reads.
cmd_run() {
  local id wid every dir log remote rc child uploader
  id=${A[run-id]}
  wid=${A[worker-id]}
  every=${A[upload-every]}
  dir=$(run_state_dir "$id")
  log=$dir/worker-$wid.log
  # One folder per launch: a relaunch on a re-created VM must not overwrite the earlier logs.
  remote=${A[log-dir]}/${A[attempt]}/worker-$wid.log
  export TSEEDS_RUN_ID=$id TSEEDS_WORKER_ID=$wid
  {
    printf '[%s] run %s worker %s on %s at %s\n' "$PROG" "$id" "$wid" "$(hostname)" "$(date -u)"
    printf '[%s] command: %s/bin/tseeds train --config %s --config.%s=%s %s\n' "$PROG" \
      "${A[venv]}" "${A[config]}" "${A[run-dir-key]}" "${A[run-dir]}" "${EXTRA[*]}"
  } >>"$log"
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while true; do
      sleep "$every" &
      nap=$!
      wait "$nap"
      gcs_cp "$log" "$remote" >/dev/null 2>&1 || true
    done
  ) &
  uploader=$!
  "${A[venv]}/bin/tseeds" train --config "${A[config]}" \
    "--config.${A[run-dir-key]}=${A[run-dir]}" "${EXTRA[@]}" >>"$log" 2>&1 &
  child=$!
  trap 'kill -TERM "$child" 2>/dev/null || true' TERM INT
  set +e
  wait "$child"
  rc=$?
  # wait returns early (status > 128) when the trap fires; collect the trainer's real status.
  while kill -0 "$child" 2>/dev/null; do
    wait "$child"
    rc=$?
  done
  set -e
  kill "$uploader" 2>/dev/null || true
  local what="" why
  why=$(exit_reason "$rc" "$child")
  case $why in
    preempted) what=" (stopped on SIGTERM or a preemption notice after a checkpoint: resume)" ;;
    killed) what=" (killed by a signal: resume from the last checkpoint)" ;;
    oom-killer) what=" (killed by the kernel's out-of-memory killer: babysit.sh does not relaunch)" ;;
  esac
  printf '[%s] train exited with code %s%s at %s\n' "$PROG" "$rc" "$what" "$(date -u)" >>"$log"
  gcs_cp "$log" "$remote" >/dev/null 2>&1 || log "upload of $log to $remote failed"
  # "CODE REASON": babysit.sh relaunches on the code, except after the OOM killer.
  printf '%s %s\n' "$rc" "$why" >"$dir/exitcode"
  gcs_cp "$dir/exitcode" "${A[log-dir]}/worker-$wid.exitcode" >/dev/null 2>&1 ||
    log "upload of the exit code to ${A[log-dir]} failed"
  return "$rc"
}

main() {
  (($#)) || { usage >&2; exit 2; }
  # ssh --command starts in $HOME; relative --wheel/--config paths are relative to it everywhere.
  cd "$HOME"
  local sub=$1
  shift
  case $sub in
    -h | --help | help) usage; exit 0 ;;
  esac
  parse "$@"
  case $sub in
    install) cmd_install ;;
    verify) cmd_verify ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    _run) cmd_run ;;
    *) die "unknown sub-command '$sub' (install, verify, start, stop, status)" 2 ;;
  esac
}

main "$@"
