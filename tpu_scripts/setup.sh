#!/usr/bin/env bash
# Installs tseeds_jax and jax[tpu] on every worker of a TPU slice; checks that JAX sees all chips.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
usage: $TPU_PROG --name NAME --zone ZONE (--wheel FILE|gs://URL | --git-url URL --git-ref REF)
       (--accelerator TYPE | --expected-devices N) [options]

Set up every worker of a TPU slice (all commands use --worker=all):
  1. copy worker.sh (and a local wheel) to each worker with gcloud compute tpus tpu-vm scp;
  2. on each worker: make a venv, pip install the project and jax[tpu] in one resolver run;
  3. on all workers at once: python asserts jax.device_count() == expected and prints
     process_index/process_count (multi-host JAX needs every worker to start together).

required:
  --name NAME               the TPU VM (the node of a queued resource has the same name)
  --zone ZONE
  --wheel FILE|gs://URL     a tseeds_jax wheel (python -m build --wheel); a local file is copied
                            to every worker, a gs:// one is fetched by each worker
  --git-url URL --git-ref REF
                            or: pip install "tseeds_jax @ git+URL@REF" on each worker
  --accelerator TYPE        expected device count from the type (v4-32 -> 16, v5p-64 -> 32,
                            v5litepod-16 -> 16, v6e-8 -> 8, v3-32 -> 32), or
  --expected-devices N      the jax.device_count() to assert

options:
  --project PROJECT
  --jax-spec SPEC           default: jax[tpu]==<the jax pin of requirements.txt>
  --venv DIR                venv on the workers (default ~/tseeds-venv)
  --python BIN              interpreter that makes the venv (default python3)
  --internal-ip             ssh/scp via internal IPs (from a VM in the same VPC)
  --env FILE                defaults: NAME=, ZONE=, PROJECT=, ACCELERATOR=, WHEEL=, GIT_URL=, ...
  --dry-run                 print the gcloud commands, one per line, and run nothing
  -h, --help                this help

exit codes: 0 ok, 1 a gcloud command (or the device check) failed, 2 usage error
USAGE
}

TPU_ALLOWED=("${TPU_SETUP_OPTS[@]}")
tpu_parse_args "$@"
((${#PASSTHRU[@]} == 0)) || tpu_usage_error "unexpected arguments after --: ${PASSTHRU[*]}"

tpu_require name zone
tpu_check_name
tpu_check_zone
tpu_check_project
tpu_check_accelerator
tpu_check_int expected-devices 1
tpu_has accelerator || tpu_has expected-devices ||
  tpu_usage_error "--accelerator or --expected-devices is required (the device count to check)"
tpu_exclusive wheel git-url
tpu_exclusive wheel git-ref
if tpu_has wheel; then
  [[ ${OPT[wheel]} == *.whl ]] || tpu_usage_error "--wheel: '${OPT[wheel]}' is not a .whl file"
  if [[ ${OPT[wheel]} == gs://* ]]; then tpu_check_gs wheel; else tpu_check_file wheel; fi
elif tpu_has git-url || tpu_has git-ref; then
  tpu_require git-url git-ref
  tpu_check_regex git-ref '^[-A-Za-z0-9_./]+$' 'a git branch, tag or commit'
else
  tpu_usage_error "--wheel or --git-url/--git-ref is required (what to install on the workers)"
fi
tpu_set_scope
tpu_worker_flags

name=${OPT[name]}
devices=${OPT[expected-devices]:-$(tpu_expected_devices "${OPT[accelerator]:-}")}
jax_spec=${OPT[jax-spec]:-}
if [[ -z $jax_spec ]]; then
  pin=$(sed -n 's/^jax==\([^[:space:]]*\).*/\1/p' "$TPU_LIB_DIR/../requirements.txt" \
    2>/dev/null || true)
  jax_spec="jax[tpu]${pin:+==$pin}"
fi

worker_args=(--jax-spec "$jax_spec")
tpu_has venv && worker_args+=(--venv "${OPT[venv]}")
tpu_has python && worker_args+=(--python "${OPT[python]}")

tpu_run gcloud compute tpus tpu-vm scp "$TPU_LIB_DIR/worker.sh" "$name:tseeds-worker.sh" \
  "${TPU_WORKER_FLAGS[@]}"
if tpu_has wheel; then
  wheel=${OPT[wheel]}
  if [[ $wheel != gs://* ]]; then
    tpu_run gcloud compute tpus tpu-vm scp "$wheel" "$name:${wheel##*/}" "${TPU_WORKER_FLAGS[@]}"
    wheel=${wheel##*/}
  fi
  worker_args+=(--wheel "$wheel")
else
  worker_args+=(--git-url "${OPT[git-url]}" --git-ref "${OPT[git-ref]}")
fi

tpu_run gcloud compute tpus tpu-vm ssh "$name" "${TPU_WORKER_FLAGS[@]}" \
  "--command=$(tpu_quote bash tseeds-worker.sh install "${worker_args[@]}")"

verify_args=(--expected-devices "$devices")
tpu_has venv && verify_args+=(--venv "${OPT[venv]}")
tpu_run gcloud compute tpus tpu-vm ssh "$name" "${TPU_WORKER_FLAGS[@]}" \
  "--command=$(tpu_quote bash tseeds-worker.sh verify "${verify_args[@]}")"
((TPU_DRY_RUN)) || tpu_log "all workers of $name see $devices devices"
