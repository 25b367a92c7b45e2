#!/usr/bin/env bash
# Starts `tseeds train` on every worker of a TPU slice, in the background, with one shared run id.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
usage: $TPU_PROG --name NAME --zone ZONE --run-id ID --run-root gs://BUCKET/PATH --config FILE
       [options] [-- --config.KEY=VALUE ...]

Launch training on all workers of a TPU slice (JAX multi-host SPMD: every worker runs the same
command; on TPU, jax.distributed.initialize() finds the other workers by itself):
  1. copy worker.sh and the config file to every worker
     (gcloud compute tpus tpu-vm scp --worker=all);
  2. ssh --worker=all: each worker starts, under nohup (so ssh returns at once),
       ~/tseeds-venv/bin/tseeds train --config FILE --config.run_dir=RUN_ROOT/ID [overrides]
     with stdout+stderr in a per-worker log that is copied to LOG_DIR/ATTEMPT/worker-N.log
     (ATTEMPT: this launch's UTC time) every --upload-every seconds and at exit, followed by
     LOG_DIR/worker-N.exitcode.
With --compiled-dir DIR (a folder written by tseeds compile --out DIR), DIR/manifest.json is
copied to every worker first, and each worker runs
  env JAX_PLATFORMS=cpu ~/tseeds-venv/bin/tseeds compile --check MANIFEST --config FILE [overrides]
(lowering only, on the CPU: the chips are not touched); if it fails on any worker (a config field,
the topology, jax / jaxlib / libtpu or a program's HLO differs from what was compiled), nothing is
started and the launch exits 1. The run dir is not passed to the check (it changes no program):
compile with the config file's own run_dir field.
Running it again with the same --run-id (and --restart if the old run still lives) resumes from
the latest Orbax checkpoint under RUN_ROOT/ID.

required:
  --name NAME               the TPU VM (the node of a queued resource has the same name)
  --zone ZONE
  --run-id ID               shared by all workers; letters, digits, . _ - (no spaces)
  --run-root gs://...       the run dir is RUN_ROOT/ID (checkpoints, metrics)
  --config FILE[:ARG]       ml_collections config file (copied to the workers; keep it
                            self-contained: it runs there without the rest of configs/)

options:
  --project PROJECT
  --log-dir gs://...        per-worker logs (default RUN_ROOT/ID/logs)
  --run-dir-key KEY         config field that holds the run dir (default run_dir)
  --venv DIR                venv on the workers, as made by setup.sh (default ~/tseeds-venv)
  --upload-every SEC        log upload period (default 60)
  --restart                 stop this run id's running trainer on each worker first
  --compiled-dir DIR        check on every worker that this config and the installed code match
                            DIR/manifest.json (from tseeds compile --out DIR) before starting
  --internal-ip             ssh/scp via internal IPs
  --env FILE                defaults: NAME=, ZONE=, PROJECT=, RUN_ID=, RUN_ROOT=, CONFIG=,
                            COMPILED_DIR=, ...
  --dry-run                 print the gcloud commands, one per line, and run nothing
  -h, --help                this help
  -- --config.a.b=V ...     config overrides, passed unchanged to every worker

exit codes: 0 ok, 1 a gcloud command (or the --compiled-dir check) failed, 2 usage error
USAGE
}

TPU_ALLOWED=("${TPU_LAUNCH_OPTS[@]}")
tpu_parse_args "$@"

tpu_require name zone run-id run-root config
tpu_check_name
tpu_check_zone
tpu_check_project
tpu_check_run_id
tpu_check_gs run-root
tpu_check_gs log-dir
tpu_check_int upload-every 5
tpu_check_regex run-dir-key '^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$' \
  'a config field path like run_dir or train.run_dir'
config=${OPT[config]}
config_file=$config
config_arg=
if [[ ! -f $config && $config == *:* ]]; then
  config_file=${config%%:*}
  config_arg=:${config#*:}
fi
[[ -f $config_file ]] || tpu_usage_error "--config: no such file '$config_file'"
compiled_dir=${OPT[compiled-dir]:-}
[[ -z $compiled_dir || -f $compiled_dir/manifest.json ]] ||
  tpu_usage_error "--compiled-dir: no manifest.json in '$compiled_dir' (tseeds compile --out DIR)"
run_dir_key=${OPT[run-dir-key]:-run_dir}
for override in "${PASSTHRU[@]}"; do
  [[ $override =~ ^--config\.[A-Za-z_][A-Za-z0-9_.]*=.* ]] ||
    tpu_usage_error "override '$override' after -- must look like --config.KEY=VALUE"
  [[ $override == "--config.$run_dir_key="* ]] &&
    tpu_usage_error "override '$override' after -- clashes with --run-root/--run-id (the run dir)"
done
tpu_set_scope
tpu_worker_flags

name=${OPT[name]}
run_id=${OPT[run-id]}
run_dir=${OPT[run-root]}/$run_id
log_dir=${OPT[log-dir]:-$run_dir/logs}
# A module-safe file name: config loaders may import it by its stem.
remote_config=tseeds_config_${run_id//[-.]/_}.py
remote_manifest=tseeds_compiled_${run_id//[-.]/_}.json

# All workers log into one folder per launch, so a relaunch never overwrites an earlier log.
attempt=$(date -u +%Y%m%dT%H%M%SZ)
start_args=(--run-id "$run_id" --run-dir "$run_dir" --log-dir "$log_dir" --attempt "$attempt"
  --config "$remote_config$config_arg")
tpu_has run-dir-key && start_args+=(--run-dir-key "$run_dir_key")
tpu_has venv && start_args+=(--venv "${OPT[venv]}")
tpu_has upload-every && start_args+=(--upload-every "${OPT[upload-every]}")
tpu_has restart && start_args+=(--restart)
((${#PASSTHRU[@]} == 0)) || start_args+=(-- "${PASSTHRU[@]}")

tpu_run gcloud compute tpus tpu-vm scp "$TPU_LIB_DIR/worker.sh" "$name:tseeds-worker.sh" \
  "${TPU_WORKER_FLAGS[@]}"
tpu_run gcloud compute tpus tpu-vm scp "$config_file" "$name:$remote_config" \
  "${TPU_WORKER_FLAGS[@]}"
if [[ -n $compiled_dir ]]; then
  # The train command's config and overrides, lowered by the workers' installed code; JAX on the
  # CPU, so that the check never takes the chips (a --restart's old trainer still holds them).
  check_cmd=(env JAX_PLATFORMS=cpu "${OPT[venv]:-tseeds-venv}/bin/tseeds" compile
    --check "$remote_manifest" --config "$remote_config$config_arg" "${PASSTHRU[@]}")
  tpu_run gcloud compute tpus tpu-vm scp "$compiled_dir/manifest.json" "$name:$remote_manifest" \
    "${TPU_WORKER_FLAGS[@]}"
  tpu_run gcloud compute tpus tpu-vm ssh "$name" "${TPU_WORKER_FLAGS[@]}" \
    "--command=$(tpu_quote "${check_cmd[@]}")" ||
    tpu_die "run $run_id not started: tseeds compile --check failed on a worker (its line above \
names the difference from $compiled_dir, or why the check could not run)"
fi
tpu_run gcloud compute tpus tpu-vm ssh "$name" "${TPU_WORKER_FLAGS[@]}" \
  "--command=$(tpu_quote bash tseeds-worker.sh start "${start_args[@]}")"
((TPU_DRY_RUN)) || tpu_log "run $run_id: run dir $run_dir, logs $log_dir/$attempt/worker-N.log" \
  "(follow with: gcloud storage cat $log_dir/$attempt/worker-0.log)"
