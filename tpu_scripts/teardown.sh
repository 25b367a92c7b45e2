#!/usr/bin/env bash
# Deletes a TPU VM or a queued resource (and its node); GCS data is kept unless asked otherwise.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
usage: $TPU_PROG --name NAME --zone ZONE [--mode queued|vm] [--force] [--delete-data gs://...]

Tear down TPU capacity made by create.sh.
  --mode queued (default), with --force:
      gcloud compute tpus queued-resources delete NAME --force   (node and request in one go)
  --mode queued, without --force: delete the node (tpu-vm delete), then the queued resource;
      the queued resource delete refuses while a node exists, which --force skips.
  --mode vm: gcloud compute tpus tpu-vm delete NAME

required:
  --name NAME
  --zone ZONE

options:
  --project PROJECT
  --mode queued|vm          default queued
  --force                   queued only: delete the queued resource together with its node
  --delete-data gs://...    also delete this GCS prefix (run dirs, logs); default: keep GCS data
  --env FILE                defaults: NAME=, ZONE=, PROJECT=, MODE=
  --dry-run                 print the gcloud commands, one per line, and run nothing
  -h, --help                this help

exit codes: 0 ok, 1 a gcloud command failed, 2 usage error
USAGE
}

TPU_ALLOWED=("${TPU_TEARDOWN_OPTS[@]}")
tpu_parse_args "$@"
((${#PASSTHRU[@]} == 0)) || tpu_usage_error "unexpected arguments after --: ${PASSTHRU[*]}"

tpu_require name zone
tpu_check_name
tpu_check_zone
tpu_check_project
tpu_check_choice mode queued vm
tpu_check_gs delete-data
mode=${OPT[mode]:-queued}
[[ $mode == vm ]] && tpu_has force && tpu_usage_error "--force applies to --mode queued only"
tpu_set_scope
name=${OPT[name]}

if [[ $mode == vm ]]; then
  tpu_run gcloud compute tpus tpu-vm delete "$name" "${TPU_SCOPE[@]}" --quiet
elif tpu_has force; then
  tpu_run gcloud compute tpus queued-resources delete "$name" "${TPU_SCOPE[@]}" --quiet --force
else
  # The node may not exist (request still queued, or already preempted and gone).
  tpu_run gcloud compute tpus tpu-vm delete "$name" "${TPU_SCOPE[@]}" --quiet ||
    tpu_log "node $name not deleted (it may not exist); deleting the queued resource"
  tpu_run gcloud compute tpus queued-resources delete "$name" "${TPU_SCOPE[@]}" --quiet
fi

if tpu_has delete-data; then
  tpu_run gcloud storage rm --recursive "${OPT[delete-data]}"
else
  ((TPU_DRY_RUN)) || tpu_log "GCS data kept (pass --delete-data gs://... to delete a prefix)"
fi
