"""A LoRA Thinking Seeds run (configs/tiny_lora_seeds.py) killed with SIGKILL resumes bit for bit:
the train state is the adapters and their optimizer state, the base is rebuilt from
`model.init` on restart. The harness is tests/test_preemption_kill.py's (same small model, T 3,
a checkpoint every 2 steps, the parity reward); the final checkpoint, the seed cache, the
metrics and the TensorBoard scalars must equal the uninterrupted run's.
"""

import signal

import pytest

from tests.test_preemption_kill import ROOT, STEPS, Proc, _args, _latest, assert_same_run

LORA = [f"--config={ROOT}/configs/tiny_lora_seeds.py", "--config.lora.rank=4",
        "--config.lora.alpha=8.0"]


def _lora_args(run_dir):
    """test_preemption_kill's run with the LoRA config in place of tiny_seeds_ratio.py."""
    return LORA[:1] + [a for a in _args(run_dir) if not a.startswith("--config=")] + LORA[1:]


@pytest.mark.slow  # ~60 s: three processes of a tiny model
def test_lora_seeds_sigkill_resumes_bitwise(tmp_path):
    cache = tmp_path / "jax_cache"
    ref_dir = tmp_path / "reference"
    ref = Proc(ref_dir, cache, args=_lora_args(ref_dir))
    assert ref.finish() == 0, ref.stderr[-3000:]
    assert "thinking_seeds+lora" in (ref_dir / "metrics.jsonl").read_text()
    run_dir = tmp_path / "run"
    p = Proc(run_dir, cache, args=_lora_args(run_dir))
    p.wait_for(lambda: p.metric_lines() >= 5)  # past the checkpoint of step 4, mid-cycle
    assert p.p.poll() is None, p.stderr[-2000:]
    p.p.send_signal(signal.SIGKILL)
    assert p.finish() == -signal.SIGKILL
    assert 2 <= _latest(run_dir) < STEPS
    p = Proc(run_dir, cache, args=_lora_args(run_dir))
    assert p.finish() == 0, p.stderr[-3000:]
    assert "resumed from step" in p.out
    assert_same_run(run_dir, ref_dir)
