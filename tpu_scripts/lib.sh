# shellcheck shell=bash
# Shared code of the tpu_scripts/*.sh commands: option parsing, --env files, argument validation,
# and run-or-print for --dry-run. Sourced by each script; never executed on its own.
#
# Conventions for every script:
#   * usage errors (missing/unknown/bad flag) exit 2 with a message that names the flag;
#   * --dry-run prints the exact commands, one per line on stdout, and runs nothing (it never needs
#     gcloud); progress messages always go to stderr so stdout stays a pure command list;
#   * values come from the command line, else from the --env FILE, else from built-in defaults.

# Every option any script knows: "value" options take an argument, "flag" options do not. One table
# for all scripts so that babysit.sh can forward to each child exactly the options it accepts.
declare -gA TPU_OPT_KIND=(
  [env]=value [name]=value [zone]=value [project]=value [mode]=value
  [accelerator]=value [runtime-version]=value
  [spot]=flag [reserved]=flag [best-effort]=flag
  [valid-until-duration]=value [valid-after-duration]=value
  [network]=value [subnetwork]=value [service-account]=value [internal-ip]=flag
  [wheel]=value [git-url]=value [git-ref]=value [jax-spec]=value [venv]=value [python]=value
  [expected-devices]=value
  [run-id]=value [run-root]=value [log-dir]=value [config]=value [run-dir-key]=value
  [upload-every]=value [restart]=flag [compiled-dir]=value
  [force]=flag [delete-data]=value
  [poll-interval]=value [max-retries]=value [provision-timeout]=value [once]=flag
  [simulate-state]=value [simulate-exit-codes]=value
  [dry-run]=flag [help]=flag
)

# Option groups: what each script accepts (besides env, dry-run and help, which all accept).
# SC2034: these tables are read by the scripts that source lib.sh, which shellcheck cannot see
# when it checks lib.sh on its own.
# shellcheck disable=SC2034
{
  declare -ga TPU_CREATE_OPTS=(name zone project mode accelerator runtime-version
    spot reserved best-effort valid-until-duration valid-after-duration
    network subnetwork service-account)
  declare -ga TPU_SETUP_OPTS=(name zone project internal-ip accelerator expected-devices
    wheel git-url git-ref jax-spec venv python)
  declare -ga TPU_LAUNCH_OPTS=(name zone project internal-ip run-id run-root log-dir config
    run-dir-key venv upload-every restart compiled-dir)
  declare -ga TPU_TEARDOWN_OPTS=(name zone project mode force delete-data)
  declare -ga TPU_BABYSIT_OPTS=(poll-interval max-retries provision-timeout once simulate-state
    simulate-exit-codes)
}

# Options an --env file may not set: they change what a command does, not where it does it.
declare -ga TPU_NO_ENV_OPTS=(env dry-run help simulate-state simulate-exit-codes once force
  delete-data restart)

TPU_PROG=${0##*/}
# shellcheck disable=SC2034  # used by the sourcing scripts (SC2034 note above)
TPU_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
declare -gA OPT=()
declare -ga PASSTHRU=()
declare -ga TPU_ALLOWED=()
declare -ga TPU_SCOPE=()
declare -ga TPU_FWD=()
TPU_DRY_RUN=0

tpu_log() { printf '[%s] %s\n' "$TPU_PROG" "$*" >&2; }

tpu_die() { printf '%s: error: %s\n' "$TPU_PROG" "$1" >&2; exit "${2:-1}"; }

tpu_usage_error() {
  printf '%s: error: %s\nTry %s --help\n' "$TPU_PROG" "$1" "$TPU_PROG" >&2
  exit 2
}

# The name an option has in an --env file: --runtime-version -> RUNTIME_VERSION.
tpu_env_key() { local key=${1^^}; printf '%s' "${key//-/_}"; }

tpu_is_allowed() {
  local name
  for name in "${TPU_ALLOWED[@]}"; do [[ $name == "$1" ]] && return 0; done
  return 1
}

# tpu_parse_args "$@": fills OPT[name]=value (flags get 1) from --name VALUE, --name=VALUE and
# --flag; everything after a bare `--` goes to PASSTHRU. The caller sets TPU_ALLOWED and defines
# usage(). --help prints usage() and exits 0 at once, so it works next to otherwise bad arguments.
tpu_parse_args() {
  local arg name value has_value
  TPU_ALLOWED+=(env dry-run help)
  while (($#)); do
    arg=$1
    case $arg in
      --)
        shift
        # shellcheck disable=SC2034  # read by the sourcing scripts (SC2034 note above)
        PASSTHRU=("$@")
        break
        ;;
      -h) name=help; has_value=0 ;;
      --?*=*) name=${arg%%=*}; name=${name#--}; value=${arg#*=}; has_value=1 ;;
      --?*) name=${arg#--}; has_value=0 ;;
      *) tpu_usage_error "unexpected argument '$arg' (options start with --)" ;;
    esac
    if ! tpu_is_allowed "$name" || [[ -z ${TPU_OPT_KIND[$name]:-} ]]; then
      tpu_usage_error "unknown option --$name"
    fi
    if [[ $name == help ]]; then usage; exit 0; fi
    if [[ ${TPU_OPT_KIND[$name]} == flag ]]; then
      ((has_value)) && tpu_usage_error "--$name takes no value (got '$arg')"
      OPT[$name]=1
      shift
      continue
    fi
    if ((!has_value)); then
      if (($# < 2)) || [[ $2 == --* ]]; then tpu_usage_error "--$name needs a value"; fi
      value=$2
      shift
    fi
    [[ -n $value ]] || tpu_usage_error "--$name needs a non-empty value"
    OPT[$name]=$value
    shift
  done
  [[ -n ${OPT[dry-run]:-} ]] && TPU_DRY_RUN=1
  tpu_load_env
}

# Reads defaults from the --env FILE (a bash file of KEY=value lines, e.g. ZONE=us-east5-a). The
# file is sourced in a subshell that starts with its keys unset, so a stray NAME or ZONE in the
# caller's environment never leaks in, and only the keys of options this script accepts are read.
tpu_load_env() {
  local file=${OPT[env]:-} name key value
  [[ -n $file ]] || return 0
  [[ -f $file && -r $file ]] || tpu_usage_error "--env: cannot read file '$file'"
  local -a keys=()
  for name in "${TPU_ALLOWED[@]}"; do
    [[ " ${TPU_NO_ENV_OPTS[*]} " == *" $name "* ]] && continue
    keys+=("$(tpu_env_key "$name")")
  done
  local dump
  # The file's own syntax errors must surface as a usage error naming --env, hence the subshell's
  # exit status is checked before anything is read from it.
  if ! dump=$(
    unset "${keys[@]}"
    # shellcheck disable=SC1090  # the file is chosen by the user at run time
    source "$file" >/dev/null || exit 3
    for key in "${keys[@]}"; do
      [[ -n ${!key+x} ]] && printf '%s=%q\n' "$key" "${!key}"
    done
    exit 0
  ); then
    tpu_usage_error "--env: sourcing '$file' failed"
  fi
  local line
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    key=${line%%=*}
    # %q-quoted by the subshell above; eval turns it back into the exact value.
    eval "value=${line#*=}"
    name=${key,,}
    name=${name//_/-}
    [[ -n ${OPT[$name]+x} ]] && continue  # the command line wins
    if [[ ${TPU_OPT_KIND[$name]} == flag ]]; then
      case ${value,,} in
        1 | true | yes) OPT[$name]=1 ;;
        0 | false | no | '') ;;
        *) tpu_usage_error "--env: $key in '$file' must be true or false, got '$value'" ;;
      esac
    elif [[ -n $value ]]; then
      OPT[$name]=$value
    fi
  done <<<"$dump"
}

tpu_has() { [[ -n ${OPT[$1]:-} ]]; }

tpu_require() {
  local name
  for name in "$@"; do
    tpu_has "$name" ||
      tpu_usage_error "--$name is required (or set $(tpu_env_key "$name") in an --env file)"
  done
}

# At most one of the given options may be set.
tpu_exclusive() {
  local name seen=()
  for name in "$@"; do tpu_has "$name" && seen+=("--$name"); done
  ((${#seen[@]} <= 1)) || tpu_usage_error "${seen[*]} are mutually exclusive; pick one"
}

tpu_check_regex() {  # NAME REGEX WHAT
  tpu_has "$1" || return 0
  [[ ${OPT[$1]} =~ $2 ]] || tpu_usage_error "--$1: '${OPT[$1]}' is not $3"
}

tpu_check_name() {  # a TPU node / queued resource id (GCE resource name rules)
  tpu_check_regex "${1:-name}" '^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$' \
    'a valid TPU name (lower-case letters, digits and -, starting with a letter, at most 63)'
}

tpu_check_zone() {
  tpu_check_regex zone '^[a-z]+-[a-z]+[0-9]+-[a-z]$' 'a zone like us-central2-b or europe-west4-a'
}

tpu_check_project() {
  tpu_check_regex project '^([a-z][-a-z0-9.]*:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$' 'a GCP project id'
}

# Accelerator types of the TPU VM API: v2-8, v3-32, v4-32, v5p-64, v5litepod-16 (v5e), v6e-8.
# v2/v3/v4/v5p count TensorCores, v5e/v6e count chips.
TPU_ACCEL_RE='^(v2|v3|v4|v5p|v5litepod|v6e)-([1-9][0-9]*)$'

tpu_check_accelerator() {
  tpu_check_regex accelerator "$TPU_ACCEL_RE" \
    'an accelerator type like v4-32, v5p-64, v5litepod-16 or v6e-8'
  tpu_has accelerator || return 0
  local gen=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]}
  case $gen in
    v2 | v3)
      ((n % 8 == 0)) || tpu_usage_error \
        "--accelerator: $gen slices come in multiples of 8 cores, got '${OPT[accelerator]}'"
      ;;
    v4 | v5p)
      ((n % 2 == 0)) || tpu_usage_error \
        "--accelerator: $gen counts TensorCores (2 per chip), got odd '${OPT[accelerator]}'"
      ;;
  esac
  return 0
}

# jax.device_count() on a whole slice: one device per TensorCore on v2/v3, one per chip (megacore)
# on v4/v5p, one per chip on v5e/v6e.
tpu_expected_devices() {
  [[ $1 =~ $TPU_ACCEL_RE ]] || return 1
  local gen=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]}
  case $gen in
    v4 | v5p) printf '%d' $((n / 2)) ;;
    *) printf '%d' "$n" ;;
  esac
}

# The TPU VM software image Google documents for JAX on each generation.
tpu_default_runtime() {
  [[ $1 =~ $TPU_ACCEL_RE ]] || return 1
  case ${BASH_REMATCH[1]} in
    v2 | v3 | v4) printf 'tpu-ubuntu2204-base' ;;
    v5p) printf 'v2-alpha-tpuv5' ;;
    v5litepod) printf 'v2-alpha-tpuv5-lite' ;;
    v6e) printf 'v2-alpha-tpuv6e' ;;
  esac
}

tpu_check_run_id() {
  tpu_check_regex run-id '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' \
    'a run id (letters, digits, . _ -, starting with a letter or digit, at most 128; no spaces)'
}

tpu_check_gs() {  # NAME: a gs://bucket[/path] URL without spaces or trailing slash
  tpu_check_regex "$1" '^gs://[a-z0-9][-a-z0-9_.]{1,220}[a-z0-9](/[^[:space:]]*[^/[:space:]])?$' \
    'a gs://BUCKET[/PATH] URL (no spaces, no trailing /)'
}

tpu_check_int() {  # NAME MIN
  tpu_check_regex "$1" '^[0-9]+$' 'a non-negative integer'
  tpu_has "$1" || return 0
  ((10#${OPT[$1]} >= $2)) || tpu_usage_error "--$1 must be at least $2, got '${OPT[$1]}'"
}

tpu_check_duration() {  # gcloud duration: 30m, 6h, 2d, 1h30m or ISO 8601 like P1DT2H
  tpu_check_regex "$1" '^(([0-9]+[smhdSMHD])+|P[0-9YMWDTHS.]+)$' \
    'a duration like 30m, 6h, 2d or P1D'
}

tpu_check_choice() {  # NAME CHOICE...
  local name=$1 choice
  shift
  tpu_has "$name" || return 0
  for choice in "$@"; do [[ ${OPT[$name]} == "$choice" ]] && return 0; done
  tpu_usage_error "--$name must be one of: $* (got '${OPT[$name]}')"
}

tpu_check_file() {
  tpu_has "$1" || return 0
  [[ -f ${OPT[$1]} ]] || tpu_usage_error "--$1: no such file '${OPT[$1]}'"
}

# Shell-quotes words so that the printed line can be pasted into bash (and so that the remote shell
# of `tpu-vm ssh --command` parses back exactly these words). Plain words stay unquoted.
tpu_quote() {
  local word out=() plain='^[-A-Za-z0-9_./:=@%+,]+$'
  for word in "$@"; do
    if [[ $word =~ $plain ]]; then
      out+=("$word")
    else
      out+=("'${word//\'/\'\\\'\'}'")
    fi
  done
  printf '%s\n' "${out[*]}"
}

# Run-or-print: with --dry-run print the command (one line), else log it to stderr and run it.
tpu_run() {
  if ((TPU_DRY_RUN)); then
    tpu_quote "$@"
    return 0
  fi
  printf '+ %s\n' "$(tpu_quote "$@")" >&2
  "$@" || {
    local rc=$?
    tpu_log "command failed (exit $rc): $1 ${2:-} ${3:-} ${4:-} ${5:-}"
    return 1
  }
}

# --zone/--project for every gcloud call, set once after validation.
tpu_set_scope() {
  TPU_SCOPE=("--zone=${OPT[zone]}")
  tpu_has project && TPU_SCOPE+=("--project=${OPT[project]}")
  return 0
}

# Fills TPU_FWD with --name=value / --flag for each given option that is set (babysit -> children).
tpu_forward() {
  local name
  TPU_FWD=()
  for name in "$@"; do
    tpu_has "$name" || continue
    if [[ ${TPU_OPT_KIND[$name]} == flag ]]; then
      TPU_FWD+=("--$name")
    else
      TPU_FWD+=("--$name=${OPT[$name]}")
    fi
  done
  ((TPU_DRY_RUN)) && TPU_FWD+=(--dry-run)
  return 0
}

# The ssh/scp flags that reach every worker of the slice.
tpu_worker_flags() {
  TPU_WORKER_FLAGS=("${TPU_SCOPE[@]}" --worker=all)
  tpu_has internal-ip && TPU_WORKER_FLAGS+=(--internal-ip)
  return 0
}
