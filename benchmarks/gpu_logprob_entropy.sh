#!/usr/bin/env bash
# Checks the Pallas (Triton) fused log-prob / entropy kernel on an NVIDIA GPU against float64
# references, then times pallas / chunked / naive forward+backward at (8192, 3584, 152064) and
# prints markdown tables (paste them into docs/benchmarks.md, section logprob_entropy).
#
# Needs: an NVIDIA GPU, jax with CUDA (pip install "jax[cuda12]"), this repo installed
# (pip install -e .). Extra arguments go to gpu_logprob_entropy.py, e.g.
#   benchmarks/gpu_logprob_entropy.sh --dtype float32 --runs 10
#   benchmarks/gpu_logprob_entropy.sh --skip-bench          # numerics only (seconds)
# Exit status is non-zero when a numerics check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "error: nvidia-smi not found; this script needs an NVIDIA GPU" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

platform=$(python -c 'import jax; print(jax.default_backend())')
if [[ "$platform" != "gpu" ]]; then
  echo "error: JAX sees backend '$platform', not gpu; install jax[cuda12]" >&2
  exit 2
fi

# Leave room for naive's [N, V] float32 logits (5 GB at the largest shape) and its gradients.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
exec python benchmarks/gpu_logprob_entropy.py "$@"
