#!/usr/bin/env bash
# Creates TPU capacity: a queued resource (default) or a plain TPU VM (--mode vm).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<EOF
usage: $TPU_PROG --name NAME --zone ZONE --accelerator TYPE [options]

Create a Cloud TPU slice for tseeds_jax.

  --mode queued (default): gcloud compute tpus queued-resources create NAME --node-id=NAME ...
      The request waits in a queue until capacity is free; its node (the TPU VM) gets the same
      name, so setup.sh/launch.sh/babysit.sh take --name NAME in both modes.
  --mode vm: gcloud compute tpus tpu-vm create NAME ... (immediate or failing; small slices).

required:
  --name NAME               TPU node and queued resource id (lower case, digits, -)
  --zone ZONE               e.g. us-central2-b, us-east5-a, europe-west4-a
  --accelerator TYPE        v2-8, v3-32, v4-32, v5p-64, v5litepod-16, v6e-8, ...

capacity (at most one; default: on-demand):
  --spot                    Spot capacity: cheaper, may be preempted at any time
  --reserved                consume a reservation of the project
  --best-effort             legacy name of preemptible queued capacity; gcloud GA no longer has it,
                            so it is sent as --spot (its successor) with a warning

options:
  --project PROJECT         GCP project (default: gcloud's core/project)
  --mode queued|vm          default queued
  --runtime-version V       TPU software image (default per generation: tpu-ubuntu2204-base for
                            v2/v3/v4, v2-alpha-tpuv5 for v5p, v2-alpha-tpuv5-lite for v5e,
                            v2-alpha-tpuv6e for v6e)
  --valid-until-duration D  queued only: give up if not provisioned within D (e.g. 6h, 2d)
  --valid-after-duration D  queued only: do not provision before D from now
  --network NET, --subnetwork SUBNET, --service-account EMAIL
  --env FILE                bash file with defaults: NAME=, ZONE=, PROJECT=, ACCELERATOR=, MODE=,
                            RUNTIME_VERSION=, SPOT=true, ... (command-line flags win)
  --dry-run                 print the gcloud commands, one per line, and run nothing
  -h, --help                this help

exit codes: 0 ok, 1 a gcloud command failed, 2 usage error
EOF
}

TPU_ALLOWED=("${TPU_CREATE_OPTS[@]}")
tpu_parse_args "$@"
((${#PASSTHRU[@]} == 0)) || tpu_usage_error "unexpected arguments after --: ${PASSTHRU[*]}"

tpu_require name zone accelerator
tpu_check_name
tpu_check_zone
tpu_check_project
tpu_check_accelerator
tpu_check_choice mode queued vm
tpu_exclusive spot reserved best-effort
tpu_check_duration valid-until-duration
tpu_check_duration valid-after-duration
mode=${OPT[mode]:-queued}
if [[ $mode == vm ]]; then
  for flag in valid-until-duration valid-after-duration; do
    tpu_has "$flag" && tpu_usage_error "--$flag applies to --mode queued only"
  done
fi
tpu_set_scope

name=${OPT[name]}
runtime=${OPT[runtime-version]:-$(tpu_default_runtime "${OPT[accelerator]}")}

capacity=()
if tpu_has spot; then
  capacity=(--spot)
elif tpu_has reserved; then
  capacity=(--reserved)
elif tpu_has best-effort; then
  tpu_log "warning: --best-effort is the legacy (alpha-only) tier that Spot replaced;" \
    "requesting --spot"
  capacity=(--spot)
fi

extra=()
for flag in network subnetwork service-account; do
  tpu_has "$flag" && extra+=("--$flag=${OPT[$flag]}")
done

if [[ $mode == queued ]]; then
  for flag in valid-until-duration valid-after-duration; do
    tpu_has "$flag" && extra+=("--$flag=${OPT[$flag]}")
  done
  tpu_run gcloud compute tpus queued-resources create "$name" "${TPU_SCOPE[@]}" \
    "--node-id=$name" "--accelerator-type=${OPT[accelerator]}" "--runtime-version=$runtime" \
    "${capacity[@]}" "${extra[@]}"
  ((TPU_DRY_RUN)) || tpu_log "queued resource $name requested; watch it with:" \
    "gcloud compute tpus queued-resources describe $name ${TPU_SCOPE[*]}" \
    "--format='value(state.state)'"
else
  tpu_run gcloud compute tpus tpu-vm create "$name" "${TPU_SCOPE[@]}" \
    "--accelerator-type=${OPT[accelerator]}" "--version=$runtime" "${capacity[@]}" "${extra[@]}"
fi
