#!/usr/bin/env bash
# Watches a TPU slice and its training run; after preemption re-creates the slice, re-runs setup and
# relaunches training with the same run id, so that the trainer resumes from its latest checkpoint.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
usage: $TPU_PROG [create.sh, setup.sh and launch.sh options] [babysit options]
       [-- --config.KEY=VALUE ...]

Poll the queued resource (--mode queued, default) or TPU VM (--mode vm) every --poll-interval
seconds and act on its state:
  ACTIVE / READY (healthy)     read LOG_DIR/worker-*.exitcode: all 0 -> training finished, exit 0;
                               only 0 and resume codes (75: the trainer checkpointed on SIGTERM
                               or a preemption notice; 143 / 137: killed by TERM / KILL before it
                               could) -> relaunch (launch.sh --restart), it resumes; 137 that
                               the worker recorded as the kernel's OOM killer ("137 oom-killer")
                               -> no relaunch (it would run out of memory again), exit 1; any
                               other code (1: an error, 2: a bad config, 130: stopped with
                               Ctrl-C) -> training failed, no relaunch, exit 1; none -> ask worker 0 over
                               ssh whether the trainer runs; if not (a fresh or rebooted slice)
                               -> setup.sh, launch.sh --restart
  PREEMPTED SUSPENDING SUSPENDED FAILED TERMINATED STOPPED, or not found (GONE)
                               recover: teardown.sh (queued: --force), create.sh, wait until
                               healthy, setup.sh, launch.sh --restart with the SAME run id; the
                               trainer resumes from the latest Orbax checkpoint in RUN_ROOT/ID
  anything else (ACCEPTED, WAITING_FOR_RESOURCES, PROVISIONING, CREATING, ...)
                               wait
Every recovery, relaunch or repeated setup counts against --max-retries. Started on a slice
that does not exist yet, the first poll sees GONE and creates everything.

It takes the options of create.sh, setup.sh and launch.sh (see their --help) and forwards them:
  --name --zone --project --mode --accelerator --runtime-version --spot|--reserved|--best-effort
  --valid-until-duration --valid-after-duration --network --subnetwork --service-account
  --wheel | --git-url --git-ref, --jax-spec --venv --python --expected-devices --internal-ip
  --run-id --run-root --log-dir --config --run-dir-key --upload-every --compiled-dir, -- overrides

babysit options:
  --poll-interval SEC       seconds between polls (default 300)
  --max-retries N           recoveries/relaunches before giving up with exit 1 (default 20)
  --provision-timeout SEC   how long a recovery waits for the new slice to become healthy
                            (default 21600); after that the main loop keeps polling
  --once                    poll once, act (a recovery runs to the end), and exit
  --simulate-state STATE    with --dry-run only: pretend the first poll returned STATE (e.g.
                            PREEMPTED, SUSPENDED, GONE, ACTIVE) to print that branch's commands
  --simulate-exit-codes "C..."  with --dry-run only: pretend the workers' exit-code files hold
                            these codes (e.g. "75 0" or "1 0"; CODE:REASON for a recorded
                            reason, e.g. "137:oom-killer 0") to print what follows
  --env FILE                defaults for all options above (NAME=, ZONE=, RUN_ID=, ...)
  --dry-run                 print the gcloud commands, one per line, and run nothing; implies
                            --once; without --simulate-state the slice counts as healthy
  -h, --help                this help

exit codes: 0 healthy, recovered, relaunched or finished; 1 recovery failed / retries exhausted /
training failed; 2 usage error
USAGE
}

HEALTHY_STATES=(ACTIVE READY)
BROKEN_STATES=(PREEMPTED SUSPENDING SUSPENDED FAILED TERMINATED STOPPED GONE)
PENDING_STATES=(ACCEPTED PROVISIONING WAITING_FOR_RESOURCES CREATING STARTING RESTARTING
  REPAIRING DELETING UNKNOWN)

TPU_ALLOWED=("${TPU_CREATE_OPTS[@]}" "${TPU_SETUP_OPTS[@]}" "${TPU_LAUNCH_OPTS[@]}"
  "${TPU_BABYSIT_OPTS[@]}")
tpu_parse_args "$@"

tpu_check_int poll-interval 1
tpu_check_int max-retries 0
tpu_check_int provision-timeout 0
tpu_check_choice simulate-state "${HEALTHY_STATES[@]}" "${BROKEN_STATES[@]}" "${PENDING_STATES[@]}"
tpu_has simulate-state && ! ((TPU_DRY_RUN)) &&
  tpu_usage_error "--simulate-state works with --dry-run only (it would delete a real slice)"
tpu_has simulate-exit-codes && ! ((TPU_DRY_RUN)) &&
  tpu_usage_error "--simulate-exit-codes works with --dry-run only"
[[ ${OPT[simulate-exit-codes]:-0} =~ ^[0-9]+(:[a-z-]+)?( [0-9]+(:[a-z-]+)?)*$ ]] ||
  tpu_usage_error "--simulate-exit-codes '${OPT[simulate-exit-codes]}': give exit codes separated by spaces, e.g. \"75 0\" or \"137:oom-killer 0\""
tpu_has restart && tpu_usage_error "--restart is implied: babysit.sh relaunches with --restart"
poll_interval=$((10#${OPT[poll-interval]:-300}))
max_retries=$((10#${OPT[max-retries]:-20}))
provision_timeout=$((10#${OPT[provision-timeout]:-21600}))
mode=${OPT[mode]:-queued}

# Validate everything now, with the children's own rules, so that a bad flag fails in a second
# and not hours later in the middle of a recovery.
child() {  # SCRIPT OPTION-GROUP... [-- EXTRA]: runs tpu_scripts/SCRIPT with the forwarded options
  local script=$1
  shift
  local -a names=() extra=()
  while (($#)) && [[ $1 != -- ]]; do names+=("$1"); shift; done
  (($#)) && shift && extra=("$@")
  tpu_forward "${names[@]}"
  "$TPU_LIB_DIR/$script" "${TPU_FWD[@]}" "${extra[@]}"
}
launch_extra=(--restart -- "${PASSTHRU[@]}")
teardown_names=(name zone project mode)
[[ $mode == queued ]] && OPT[force]=1 && teardown_names+=(force)
validate() {  # runs a child in dry-run mode; on failure shows its message and exits with its code
  local rc=0 err
  err=$( (TPU_DRY_RUN=1 child "$@" 2>&1 >/dev/null)) || rc=$?
  ((rc == 0)) && return 0
  printf '%s\n' "$err" >&2
  exit "$rc"
}
validate create.sh "${TPU_CREATE_OPTS[@]}"
validate setup.sh "${TPU_SETUP_OPTS[@]}"
validate teardown.sh "${teardown_names[@]}"
validate launch.sh "${TPU_LAUNCH_OPTS[@]}" -- "${launch_extra[@]}"
tpu_set_scope
name=${OPT[name]}
run_dir=${OPT[run-root]}/${OPT[run-id]}
log_dir=${OPT[log-dir]:-$run_dir/logs}
((TPU_DRY_RUN)) && OPT[once]=1

errfile=$(mktemp)
trap 'rm -f "$errfile"' EXIT

in_list() {  # WORD LIST...
  local word=$1
  shift
  [[ " $* " == *" $word "* ]]
}

# Sets STATE from one gcloud describe; "GONE" when the resource does not exist, "UNKNOWN" when
# gcloud itself failed (network, auth): never recreate a slice because of a failed poll.
SIMULATED=${OPT[simulate-state]:-}
describe() {  # KIND (queued-resources|tpu-vm) FORMAT
  local out
  local -a cmd=(gcloud compute tpus "$1" describe "$name" "${TPU_SCOPE[@]}" "--format=value($2)")
  if ((TPU_DRY_RUN)); then
    tpu_quote "${cmd[@]}"
    STATE=${SIMULATED:-${HEALTHY_STATES[0]}}
    [[ $1 == tpu-vm && $STATE == ACTIVE ]] && STATE=READY
    return 0
  fi
  if out=$("${cmd[@]}" 2>"$errfile"); then
    STATE=${out:-UNKNOWN}
  elif grep -qiE 'NOT_FOUND|not found|404' "$errfile"; then
    STATE=GONE
  else
    tpu_log "describe failed: $(tr '\n' ' ' <"$errfile")"
    STATE=UNKNOWN
  fi
}

poll() {
  if [[ $mode == queued ]]; then
    describe queued-resources state.state
    # A queued resource may still say ACTIVE while its node was preempted or deleted.
    if [[ $STATE == ACTIVE && -z $SIMULATED ]]; then
      describe tpu-vm state
      [[ $STATE == READY ]] && STATE=ACTIVE
    fi
  else
    describe tpu-vm state
  fi
  SIMULATED=""  # only the first poll is simulated; the re-created slice comes up healthy
}

classify() {
  if in_list "$STATE" "${HEALTHY_STATES[@]}"; then
    printf healthy
  elif in_list "$STATE" "${BROKEN_STATES[@]}"; then
    printf broken
  else
    printf pending
  fi
}

attempts=0
take_attempt() {
  if ((attempts >= max_retries)); then
    tpu_die "giving up: $attempts recoveries/relaunches used (--max-retries $max_retries)"
  fi
  attempts=$((attempts + 1))
  tpu_log "$1 (attempt $attempts/$max_retries)"
}

NEED_SETUP=0
setup_and_launch() {
  child setup.sh "${TPU_SETUP_OPTS[@]}" || return 1
  child launch.sh "${TPU_LAUNCH_OPTS[@]}" -- "${launch_extra[@]}" || return 1
  NEED_SETUP=0
  tpu_log "run ${OPT[run-id]} relaunched on $name;" \
    "it resumes from the latest checkpoint in $run_dir"
}

wait_healthy() {
  local start=$SECONDS
  while true; do
    poll
    case $(classify) in
      healthy) return 0 ;;
      broken) tpu_log "new slice went $STATE while coming up"; return 1 ;;
    esac
    if ((SECONDS - start >= provision_timeout)); then
      tpu_log "slice still $STATE after ${provision_timeout}s"
      return 1
    fi
    tpu_log "slice $STATE; waiting"
    sleep "$poll_interval"
  done
}

recover() {
  take_attempt "$name is $STATE: delete, create, setup, relaunch run ${OPT[run-id]}"
  if [[ $STATE != GONE ]]; then
    child teardown.sh "${teardown_names[@]}" || tpu_log "teardown failed; trying create anyway"
  fi
  child create.sh "${TPU_CREATE_OPTS[@]}" || return 1
  NEED_SETUP=1
  wait_healthy || return 1
  setup_and_launch
}

# `tseeds train` exit codes that mean "stopped early, resume me" (rl/run/preemption.py): 75 it
# checkpointed on SIGTERM or a preemption notice; 143 / 137 (128 + TERM / KILL) it was killed
# before its handler ran (during start-up) or without notice, and resumes from its last checkpoint;
# a 137 that the worker recorded as the OOM killer's is not relaunched (training_status).
RESUME_CODES=(75 143 137)

# Sets TRAINING to "finished" (all 0), "resume" (only 0 and resume codes), "oom" (a trainer
# killed by the kernel's OOM killer, and no failure), "failed" (any other code) or "running" from
# the exit-code files that the workers upload when the trainer exits (worker.sh: "CODE REASON");
# no file yet means the trainer is still running. CODES: the codes read.
training_status() {
  local -a cmd=(gcloud storage cat "$log_dir/worker-*.exitcode")
  local out code reason
  TRAINING=running
  CODES=""
  if ((TPU_DRY_RUN)); then
    tpu_quote "${cmd[@]}"
    tpu_has simulate-exit-codes || return 0
    out=${OPT[simulate-exit-codes]// /$'\n'}
    out=${out//:/ }
  else
    out=$("${cmd[@]}" 2>/dev/null) || return 0
  fi
  [[ -n $out ]] || return 0
  TRAINING=finished
  while read -r code reason; do
    [[ -z $code ]] && continue
    CODES+="${CODES:+ }$code"
    if [[ $code == 0 ]]; then
      continue
    elif [[ $reason == oom-killer ]]; then
      [[ $TRAINING == failed ]] || TRAINING=oom
    elif in_list "$code" "${RESUME_CODES[@]}"; then
      [[ $TRAINING == failed || $TRAINING == oom ]] || TRAINING=resume
    else
      TRAINING=failed
    fi
  done <<<"$out"
}

# Asks worker 0 whether this run's trainer process is alive. Returns 0 running, 1 not running (a
# fresh or rebooted slice: status says so, or worker.sh is not there yet), 2 unknown (ssh failed).
probe_worker0() {
  local -a cmd=(gcloud compute tpus tpu-vm ssh "$name" "${TPU_SCOPE[@]}" --worker=0)
  tpu_has internal-ip && cmd+=(--internal-ip)
  cmd+=("--command=$(tpu_quote bash tseeds-worker.sh status --run-id "${OPT[run-id]}")")
  if ((TPU_DRY_RUN)); then
    tpu_quote "${cmd[@]}"
    return 0
  fi
  local rc=0
  "${cmd[@]}" >/dev/null 2>"$errfile" || rc=$?
  case $rc in
    0) return 0 ;;
    3 | 127) return 1 ;;
    *) tpu_log "could not ask worker 0 (exit $rc): $(tr '\n' ' ' <"$errfile")"; return 2 ;;
  esac
}

step() {  # one poll and the action it calls for; returns 1 when an action failed
  poll
  local kind
  kind=$(classify)
  tpu_log "$name: $STATE ($kind)"
  case $kind in
    broken) recover ;;
    pending) return 0 ;;
    healthy)
      if ((NEED_SETUP)); then
        take_attempt "slice healthy again; setup and launch"
        setup_and_launch
        return
      fi
      training_status
      case $TRAINING in
        finished) tpu_log "run ${OPT[run-id]} finished (all exit codes 0)"; exit 0 ;;
        resume)
          take_attempt "training stopped to be resumed (exit codes: $CODES); relaunching run ${OPT[run-id]}"
          child launch.sh "${TPU_LAUNCH_OPTS[@]}" -- "${launch_extra[@]}"
          ;;
        failed)
          tpu_die "training of run ${OPT[run-id]} failed (exit codes: $CODES); not relaunching: read the worker logs in $log_dir"
          ;;
        oom)
          tpu_die "training of run ${OPT[run-id]} was killed by the kernel's out-of-memory killer on a worker (exit codes: $CODES); not relaunching: it would run out of host memory again. Lower host memory use (e.g. fewer checkpoints in flight, smaller rollout batches) and relaunch with launch.sh --restart; it resumes from its last checkpoint. Worker logs: $log_dir"
          ;;
        running)
          local alive=0
          probe_worker0 || alive=$?
          if ((alive == 1)); then
            take_attempt "run ${OPT[run-id]} is not running on worker 0; setup and launch"
            setup_and_launch
          fi
          ;;
      esac
      ;;
  esac
}

while true; do
  rc=0
  step || rc=$?
  ((rc == 0)) || tpu_log "this step failed (exit $rc); the next poll tries again"
  if tpu_has once; then exit "$rc"; fi
  sleep "$poll_interval"
done
