"""End-to-end RL training throughput: our `Trainer` against TRL's `GRPOTrainer` (loss "dapo").

Both sides train the same random Qwen2-shaped model (float32, identical weights: the HF model is
written with `save_pretrained` and ours loads that folder with `model.init = "hf:DIR"`) on the
same batch shape: B prompts x G completions of exactly R new tokens (no EOS stopping on either
side: TRL generates with `min_new_tokens = R`, ours samples with no stop tokens), a trivial
reward (parity of the last completion token), one AdamW update per batch (same lr, betas, eps,
grad clip, no weight decay, no KL, no reference model), on the CPU.

Throughput = generated tokens / wall-clock seconds of a whole step (rollout + reward + update).
By default the two trainers are interleaved step by step (TRL step, then our step, from a TRL
callback) so that load from other jobs on a shared machine hits both sides alike; `--sequential`
runs ours first, then TRL. Seconds per step are medians over `--steps` steps after `--warmup`
warm-up steps; our compile / warm-up time is reported separately.

Threads: `--threads 1` (default) pins both torch and XLA to one intra-op thread. On a shared
2-core machine torch's OpenMP pool at 2 threads collapses under oversubscription (measured at load
~12: HF `generate` of 16 x 64 tokens took 1.7 s at 1 thread, 25-66 s at 2 threads), which would
make the comparison meaningless; `--threads 0` keeps each library's default. Besides wall-clock,
process CPU time per step is reported: it measures the work even when other jobs share the cores.

TRL is optional and not a project requirement. Install it with `pip install trl` (1.16.0 was
used: it keeps torch 2.13.0+cpu and transformers 5.24.0 and adds accelerate and datasets). Without
it the script runs our side only and says so.

    python benchmarks/bench_train_throughput.py --profile       # writes docs/benchmarks.md
    python benchmarks/bench_train_throughput.py --no-write --steps 4 --warmup 1

Letters: B prompts per step, G completions per prompt, R completion tokens, V vocabulary.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

import docsection  # benchmarks/ is on sys.path when run as a script
import numpy as np

SECTION = "train_throughput"
DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs", "benchmarks.md")

# The Qwen2 shape under test (HF field names); float32 everywhere.
ARCH = dict(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
            rope_theta=10000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)
PAD, EOS = 0, 1  # TRL tokenizer specials; word "w{i}" has id i for i >= 2


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12, help="timed steps per side (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps per side")
    p.add_argument("--prompts", type=int, default=2, help="B")
    p.add_argument("--group", type=int, default=8, help="G")
    p.add_argument("--tokens", type=int, default=64, help="R, forced completion length")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads for both torch and XLA (0: each library's default)")
    p.add_argument("--sequential", action="store_true", help="ours first, then TRL")
    p.add_argument("--no-trl", action="store_true", help="our trainer only")
    p.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    p.add_argument("--profile", action="store_true",
                   help="also time the parts of a step in isolation (CPU time) for the docs")
    a = p.parse_args(argv)
    for name in ("steps", "prompts", "group", "tokens"):
        if getattr(a, name) < 1:
            p.error(f"--{name}={getattr(a, name)}: must be >= 1")
    if a.threads < 0:
        p.error(f"--threads={a.threads}: must be >= 0")
    if a.warmup < 1:
        p.error(f"--warmup={a.warmup}: at least one warm-up step (compilation) is needed")
    return a


# ---- shared model -------------------------------------------------------------------------
def save_hf_model(path: str, seed: int):
    """A random-init `Qwen2ForCausalLM` of ARCH written to `path`; returns the torch model."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(**ARCH, dtype="float32", bos_token_id=None, eos_token_id=EOS,
                                   pad_token_id=PAD)
    model = transformers.Qwen2ForCausalLM(cfg).float()
    model.save_pretrained(path)
    return model


def reward_of_ids(ids) -> float:
    """The trivial shared reward: 1 if the last completion token id is even (cheap, varied)."""
    return float(int(ids[-1]) % 2 == 0) if len(ids) else 0.0


# ---- ours ---------------------------------------------------------------------------------
def build_ours(a, hf_dir: str, run_dir: str):
    """(trainer, setup seconds) for our trainer on the benchmark shape (no stop tokens)."""
    from tseeds_jax.rl import setup
    from tseeds_jax.rl import setup as runner
    from tseeds_jax.rl.config import TrainConfig, tiny_config

    c = tiny_config()
    c.seed = a.seed
    c.run_dir = run_dir
    c.model.init = f"hf:{hf_dir}"
    c.rollout.batch_prompts, c.rollout.group_size = a.prompts, a.group
    c.rollout.max_response_len = a.tokens
    c.rollout.temperature, c.rollout.top_p, c.rollout.top_k = 1.0, 1.0, 0
    c.seeds.refresh_interval = 1
    c.seeds.snapshots = False
    c.loss.name = "dapo"
    c.loss.kl_coef = 0.0
    c.optim.lr = a.lr
    c.optim.weight_decay = 0.0
    c.optim.grad_clip = 1.0
    c.mesh.fsdp = 1  # one process, one device: no sharding on either side
    c.progress = False
    cfg = TrainConfig.from_config(c)

    def reward_fn(texts, refs):
        return [(reward_of_ids(t.split()), "") for t in texts]

    t0 = time.perf_counter()
    trainer = runner.make_trainer(cfg, checkpoints=False, env_overrides=dict(
        reward_fn=reward_fn, decode=lambda ids: " ".join(map(str, ids))))
    max_prefill = cfg.data.max_prompt_len + cfg.rollout.max_response_len
    trainer.env.sample_fn = setup.make_sample_fn(cfg, trainer.env.graphdef, (), max_prefill)
    return trainer, time.perf_counter() - t0


def check_same_weights(trainer, hf_model, prompt_ids) -> float:
    """Max |logits_ours - logits_HF| on one prompt (the weights are the same model's)."""
    import jax.numpy as jnp
    import torch
    from flax import nnx

    model = nnx.merge(trainer.env.graphdef, trainer.state.params)
    ids = np.asarray([prompt_ids], np.int32)
    ours = np.asarray(model(jnp.asarray(ids)))
    with torch.no_grad():
        ref = hf_model(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
    return float(np.max(np.abs(ours - ref)))


class OursRunner:
    """Steps our trainer; records its per-step metrics, wall-clock and process CPU time (the
    sampler and reward callables are wrapped to count their CPU time as well)."""

    def __init__(self, trainer, expected_tokens: int):
        self.trainer, self.expected = trainer, expected_tokens
        self.records: list[dict] = []
        self.gen_cpu = 0.0
        env = trainer.env
        for name in ("sample_fn", "reward_fn"):
            setattr(env, name, self._cpu_timed(getattr(env, name)))

    def _cpu_timed(self, fn):
        def timed(*args, **kw):
            c0 = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                self.gen_cpu += time.process_time() - c0
        return timed

    def step(self) -> None:
        self.gen_cpu = 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        m = self.trainer.train_step()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if m["generated_tokens"] != self.expected:
            raise RuntimeError(f"ours: step generated {m['generated_tokens']} tokens, expected "
                               f"{self.expected} (a stop token ended a completion?)")
        self.records.append(dict(wall=wall, cpu=cpu, gen_cpu=self.gen_cpu,
                                 rollout=m["time_rollout"], reward=m["time_reward"],
                                 learner=m["time_learner"], step=m["time_step"]))


# ---- TRL ----------------------------------------------------------------------------------
def trl_available() -> str | None:
    """None if TRL imports, else the reason."""
    try:
        import trl  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        return f"{type(e).__name__}: {e}"
    return None


def build_tokenizer(vocab_size: int):
    """A local WordLevel `PreTrainedTokenizerFast`: '<pad>', '<eos>', then words w2..w{V-1}."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS}
    vocab.update({f"w{i}": i for i in range(2, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   padding_side="left")


def build_trl(a, hf_dir: str, out_dir: str, prompt_texts: list[str], callback):
    """(GRPOTrainer subclass instance, setup seconds); its rollout+reward time is recorded."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        gen_times: list[float] = []
        gen_cpus: list[float] = []

        def _generate_and_score_completions(self, inputs):
            t0, c0 = time.perf_counter(), time.process_time()
            out = super()._generate_and_score_completions(inputs)
            self.gen_times.append(time.perf_counter() - t0)
            self.gen_cpus.append(time.process_time() - c0)
            return out

    def reward(prompts, completions, completion_ids, **kw):
        bad = [len(ids) for ids in completion_ids if len(ids) != a.tokens]
        if bad:
            raise RuntimeError(f"TRL: completions of {bad} tokens, expected {a.tokens} (EOS?)")
        return [reward_of_ids(ids) for ids in completion_ids]

    from datasets import Dataset

    t0 = time.perf_counter()
    args = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, seed=a.seed,
        per_device_train_batch_size=a.prompts * a.group, num_generations=a.group,
        gradient_accumulation_steps=1, num_iterations=1, max_steps=a.warmup + a.steps,
        max_completion_length=a.tokens, temperature=1.0, top_p=1.0, top_k=0,
        generation_kwargs=dict(min_new_tokens=a.tokens), loss_type="dapo", beta=0.0,
        epsilon=0.2, epsilon_high=0.28, scale_rewards="group", mask_truncated_completions=False,
        learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        optim="adamw_torch", shuffle_dataset=False, logging_steps=10**6, save_strategy="no",
        report_to="none", disable_tqdm=True, dataloader_num_workers=0, log_completions=False)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    trainer = TimedGRPOTrainer(model=model, reward_funcs=reward, args=args,
                               train_dataset=Dataset.from_dict({"prompt": prompt_texts}),
                               processing_class=build_tokenizer(ARCH["vocab_size"]),
                               callbacks=[callback])
    return trainer, time.perf_counter() - t0


def make_interleaving_callback(ours: OursRunner | None, expected_tokens: int):
    """A TrainerCallback timing each TRL step (previous step end -> this step end, with our
    interleaved step excluded) and then running one of our steps."""
    from transformers import TrainerCallback

    class Interleave(TrainerCallback):
        def __init__(self):
            self.mark = self.cpu_mark = None
            self.walls: list[float] = []
            self.cpus: list[float] = []

        def on_train_begin(self, args, state, control, **kw):
            self.mark, self.cpu_mark = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            self.walls.append(time.perf_counter() - self.mark)
            self.cpus.append(time.process_time() - self.cpu_mark)
            if ours is not None:
                ours.step()
            self.mark, self.cpu_mark = time.perf_counter(), time.process_time()

    return Interleave()


# ---- profile (CPU time of the parts, in isolation) ----------------------------------------
def _cpu_median(fn, n: int = 5) -> float:
    fn()
    out = []
    for _ in range(n):
        c0 = time.process_time()
        fn()
        out.append(time.process_time() - c0)
    return statistics.median(out)


def profile(a, trainer, hf_model, prompts) -> str:
    """Markdown table: CPU seconds of our sampler / learner and their torch counterparts, and of
    one SwiGLU MLP block's forward+backward as our model writes it vs with gate|up fused."""
    import jax
    import jax.numpy as jnp
    import torch

    from tseeds_jax import sampling
    from tseeds_jax.rl.rollout import samples as rollout

    gd, r, n = trainer.env.graphdef, a.tokens, a.prompts * a.group
    reqs = [p for p in prompts[: a.prompts] for _ in range(a.group)]

    def gen(temp):
        return lambda: sampling.generate((gd, trainer.state.params), reqs, max_new_tokens=r,
                                         temperature=temp, seed=list(range(n)), stop_tokens=())

    rows = [("ours: sampler, B*G x R tokens, temperature 1", _cpu_median(gen(1.0))),
            ("ours: sampler, same, greedy (no Gumbel noise)", _cpu_median(gen(0.0)))]
    samples = rollout.continue_samples(trainer.env.sample_fn, trainer.state.params, reqs[::a.group],
                                       [None] * a.prompts, a.group, r, (1, 0))
    batch = rollout.build_batch(samples, np.ones(n), prompt_width=trainer.cfg.data.max_prompt_len,
                                response_width=r, pad_id=trainer.env.pad_id)
    lrn = trainer.learner

    def update():
        trainer.state, m = lrn.update(trainer.state, batch)
        jax.device_get(m)

    rows += [("ours: learner update (fwd + bwd + AdamW)", _cpu_median(update)),
             ("ours: learner forward only (`Learner.stats`)", _cpu_median(
                 lambda: lrn.stats(trainer.state.params, batch.tokens_BT, batch.attn_mask_BT, r)))]
    ids = torch.as_tensor([reqs[0]] * n, dtype=torch.long)
    full = torch.randint(2, ARCH["vocab_size"], (n, len(reqs[0]) + r))
    opt = torch.optim.AdamW(hf_model.parameters(), lr=a.lr)

    def hf_generate():
        with torch.no_grad():
            hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                              max_new_tokens=r, min_new_tokens=r, pad_token_id=PAD,
                              eos_token_id=EOS)

    def torch_update():
        logits = hf_model(full, logits_to_keep=r + 1).logits[:, :-1]
        lp = torch.log_softmax(logits, -1).gather(-1, full[:, -r:, None])
        lp.mean().backward()
        torch.nn.utils.clip_grad_norm_(hf_model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    hf_model.eval()
    rows.append(("torch: HF `generate`, B*G x R tokens (TRL's rollout)", _cpu_median(hf_generate)))
    hf_model.train()
    rows.append(("torch: fwd + bwd + AdamW, B*G x (prompt + R)", _cpu_median(torch_update)))
    d, f = ARCH["hidden_size"], ARCH["intermediate_size"]
    key = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.random.normal(key[0], (n, batch.tokens_BT.shape[1], d))
    wg, wu = (jax.random.normal(k, (d, f)) * 0.05 for k in key[1:3])
    wd = jax.random.normal(key[3], (f, d)) * 0.05

    def mlp_split(w, x):  # as tseeds_jax.model.layers.MLP writes it
        return jnp.sum((jax.nn.silu(x @ w[0]) * (x @ w[1])) @ w[2])

    def mlp_fused(w, x):  # one [D, 2F] matmul for gate and up
        g, u = jnp.split(x @ jnp.concatenate([w[0], w[1]], axis=1), 2, axis=-1)
        return jnp.sum((jax.nn.silu(g) * u) @ w[2])

    for name, fn in (("as written (x@gate, x@up)", mlp_split), ("gate + up fused", mlp_fused)):
        step = jax.jit(jax.grad(fn, argnums=(0, 1)))
        rows.append((f"one MLP block fwd + bwd, JAX, {name}",
                     _cpu_median(lambda s=step: jax.block_until_ready(s((wg, wu, wd), x)))))
    lines = ["Profile (`--profile`): CPU seconds of the parts in isolation, median of 5 after one "
             "warm-up (same thread pinning):", "", "| part | CPU s |", "|---|---|"]
    lines += [f"| {name} | {v:.4f} |" for name, v in rows]
    v = [x for _, x in rows]
    lines += ["", f"Read-out: Gumbel-noise sampling is {(v[0] - v[1]) / v[0]:.0%} of our sampler's "
              f"CPU time; our sampler costs {v[0] / v[4]:.2f}x HF `generate`; our learner update "
              f"costs {v[2] / v[5]:.2f}x torch's fwd + bwd + AdamW (its backward "
              f"{(v[2] - v[3]) / v[3]:.1f}x its forward); the SwiGLU block's fwd + bwd as written "
              f"costs {v[6] / v[7]:.2f}x the gate + up fused form."]
    return "\n".join(lines)


# ---- report -------------------------------------------------------------------------------
def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def versions() -> str:
    import flax
    import jax

    parts = [f"Python {platform.python_version()}", f"jax {jax.__version__}",
             f"flax {flax.__version__}"]
    for mod in ("torch", "transformers", "trl", "accelerate"):
        try:
            parts.append(f"{mod} {__import__(mod).__version__}")
        except Exception:
            parts.append(f"{mod} (not installed)")
    return ", ".join(parts)


def tree_state() -> str:
    """HEAD commit and the uncommitted library files (the working tree is shared and moves)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "tseeds_jax", "kernels"],
                               cwd=root, text=True, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    files = [line[3:] for line in dirty.splitlines()]
    return f"HEAD {head}" + (f", uncommitted: {', '.join(files)}" if files else ", clean")


def machine() -> str:
    import jax

    try:
        import torch

        threads = f", torch threads {torch.get_num_threads()}"
    except Exception:
        threads = ""
    load = os.getloadavg()
    return (f"{os.cpu_count()} CPU cores visible, JAX backend `{jax.default_backend()}` "
            f"({jax.device_count()} device){threads}; load average at the end "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min)")


def render(a, cmd, ours_rows, ours_setup, trl, trl_note, logit_diff, mode, profile="") -> str:
    """The docs section. trl: {"walls", "cpus", "gen", "setup"} lists/seconds, or None."""
    n_tok = a.prompts * a.group * a.tokens
    w = a.warmup
    timed = ours_rows[w:]
    o_step = _median([r["wall"] for r in timed])
    o_cpu = _median([r["cpu"] for r in timed])
    threads = (f"both sides pinned to {a.threads} intra-op thread(s) (torch.set_num_threads, "
               f"XLA_FLAGS)" if a.threads else "library default threads")
    lines = ["## End-to-end RL training throughput (`benchmarks/bench_train_throughput.py`)", "",
             f"Command: `{cmd}` — {datetime.date.today().isoformat()}, {machine()}; {threads}.",
             "", f"Versions: {versions()}. Tree: {tree_state()}.", "",
             f"Model: random Qwen2 (V {ARCH['vocab_size']}, hidden {ARCH['hidden_size']}, "
             f"MLP {ARCH['intermediate_size']}, {ARCH['num_hidden_layers']} layers, "
             f"{ARCH['num_attention_heads']} heads / {ARCH['num_key_value_heads']} KV heads, tied "
             f"embeddings), float32, the same weights on both sides (max |logit difference| "
             f"{logit_diff:.1e}). Batch: {a.prompts} prompts x G {a.group}, exactly {a.tokens} new "
             f"tokens each ({n_tok} generated tokens per step; no EOS stopping), prompts of the "
             f"tiny chain-sum task (6-9 tokens; TRL gets word prompts of the same token lengths), "
             f"reward = parity of the last token, one AdamW update per batch (lr {a.lr:g}, "
             f"clip 1.0, no KL), temperature 1. Times: medians over {a.steps} steps after {w} "
             f"warm-up steps; {mode}. CPU s = process CPU time per step (all threads): on a "
             f"shared machine it measures the work, while wall-clock also counts waiting for a "
             f"core.", "",
             "| trainer | wall s / step | generated tokens / s | CPU s / step | rollout + reward "
             "s, wall (CPU) | update + other s, wall (CPU) | throughput vs TRL (wall) | "
             "CPU-time ratio TRL / ours |", "|---|---|---|---|---|---|---|---|"]
    o_gen = _median([r["rollout"] + r["reward"] for r in timed])
    o_gen_cpu = _median([r["gen_cpu"] for r in timed])
    ratio = cpu_ratio = "-"
    if trl:
        t_step, t_cpu = _median(trl["walls"][w:]), _median(trl["cpus"][w:])
        t_gen, t_gen_cpu = _median(trl["gen"][w:]), _median(trl["gen_cpu"][w:])
        lines.append(f"| TRL `GRPOTrainer` (torch, dapo) | {t_step:.3f} | {n_tok / t_step:,.0f} | "
                     f"{t_cpu:.3f} | {t_gen:.3f} ({t_gen_cpu:.3f}) | {t_step - t_gen:.3f} "
                     f"({t_cpu - t_gen_cpu:.3f}) | 1.00x | 1.00x |")
        ratio, cpu_ratio = f"**{t_step / o_step:.2f}x**", f"{t_cpu / o_cpu:.2f}x"
    lines.append(f"| ours (`tseeds_jax` Trainer, JAX, dapo) | {o_step:.3f} | "
                 f"{n_tok / o_step:,.0f} | {o_cpu:.3f} | {o_gen:.3f} ({o_gen_cpu:.3f}) | "
                 f"{o_step - o_gen:.3f} ({o_cpu - o_gen_cpu:.3f}) | {ratio} | {cpu_ratio} |")
    if trl_note:
        lines += ["", f"TRL: {trl_note}"]
    lines += ["", "Our step, split (medians of the per-step timers of `Trainer.train_step`, wall):",
              "", "| part | s | share of step |", "|---|---|---|"]
    parts = dict(rollout=_median([r["rollout"] for r in timed]),
                 reward=_median([r["reward"] for r in timed]),
                 learner=_median([r["learner"] for r in timed]))
    step_med = _median([r["step"] for r in timed])
    parts["other host work (advantages, batch assembly, metrics)"] = max(
        step_med - sum(parts.values()), 0.0)
    for k, v in parts.items():
        lines.append(f"| {k} | {v:.4f} | {v / step_med:.1%} |")
    lines += [f"| whole `train_step` | {step_med:.4f} | 100% |", ""]
    warm = [r["wall"] for r in ours_rows[:w]]
    extra = sum(x - o_step for x in warm)
    lines.append(f"Our start-up, reported separately (not in the table): trainer construction "
                 f"(HF weight load, char tokenizer, optimizer init) {ours_setup:.2f} s; warm-up "
                 f"steps {', '.join(f'{x:.2f}' for x in warm)} s wall, i.e. about {extra:.1f} s "
                 f"of jit compilation (sampler prefill / insert / decode loop, learner update) "
                 f"beyond steady-state steps."
                 + (f" TRL: construction {trl['setup']:.2f} s, warm-up steps "
                    f"{', '.join(f'{x:.2f}' for x in trl['walls'][:w])} s." if trl else ""))
    if profile:
        lines += ["", profile]
    return "\n".join(lines) + "\n"


# The section's tables, in order, as result records (docs/results/NAME.json).
TABLE_RECORDS = [
    ("train_throughput", "RL training step on CPU: TRL GRPOTrainer vs our Trainer, same model, "
                         "weights and batch (wall and CPU seconds per step)"),
    ("train_throughput_split", "our train_step split by its per-step timers (wall seconds)"),
    ("train_throughput_profile", "CPU seconds of the step's parts in isolation, ours and torch's"),
]


def write_section(text: str, path: str = DOCS) -> None:
    begin, end = f"<!-- BEGIN {SECTION} -->", f"<!-- END {SECTION} -->"
    old = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + block + rest.split(end, 1)[1]
    else:
        new = old.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(new)


def pin_threads(n: int) -> None:
    """n intra-op threads for XLA (before JAX is imported) and torch; 0 leaves the defaults."""
    if not n:
        return
    if "jax" in sys.modules:
        raise RuntimeError("pin_threads must run before JAX is imported")
    flags = [f"--xla_cpu_multi_thread_eigen={'true' if n > 1 else 'false'}",
             f"intra_op_parallelism_threads={n}"]
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", "")] + flags).strip()
    import torch

    torch.set_num_threads(n)
    torch.set_num_interop_threads(1)


def main(argv=None) -> int:
    a = _args(argv)
    pin_threads(a.threads)
    cmd = "python benchmarks/bench_train_throughput.py" + (
        " " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    n_tok = a.prompts * a.group * a.tokens
    why_no_trl = "disabled by --no-trl" if a.no_trl else trl_available()
    if why_no_trl:
        print(f"TRL skipped ({why_no_trl}); install it with `pip install trl` to compare.",
              flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = os.path.join(tmp, "hf")
        hf_model = save_hf_model(hf_dir, a.seed)
        trainer, ours_setup = build_ours(a, hf_dir, os.path.join(tmp, "run"))
        # The prompts our trainer will draw, read from a copy of its stream: TRL gets word
        # prompts of the same token lengths in the same order.
        import copy

        stream = copy.deepcopy(trainer.env.prompts)
        steps = a.warmup + a.steps
        ours_prompts = [p for _ in range(steps) for p in stream.take(a.prompts)[0]]
        logit_diff = check_same_weights(trainer, hf_model, ours_prompts[0])
        print(f"ours: built in {ours_setup:.2f} s; max |logit diff| vs HF {logit_diff:.2e}",
              flush=True)
        ours = OursRunner(trainer, n_tok)
        trl = None
        mode = "ours only"
        if not why_no_trl:
            texts = [" ".join(f"w{t + 2}" for t in p) for p in ours_prompts]
            interleave = not a.sequential
            if not interleave:
                for _ in range(steps):
                    ours.step()
            cb = make_interleaving_callback(ours if interleave else None, n_tok)
            trl_trainer, trl_setup = build_trl(a, hf_dir, os.path.join(tmp, "trl"), texts, cb)
            trl_trainer.train()
            trl = dict(walls=cb.walls, cpus=cb.cpus, gen=list(trl_trainer.gen_times),
                       gen_cpu=list(trl_trainer.gen_cpus), setup=trl_setup)
            mode = ("the two trainers interleaved step by step in one process" if interleave
                    else "ours first, then TRL, in one process")
        else:
            for _ in range(steps):
                ours.step()
        trl_note = "" if not why_no_trl else f"skipped ({why_no_trl})."
        prof = profile(a, trainer, hf_model, ours_prompts) if a.profile else ""
        text = render(a, cmd, ours.records, ours_setup, trl, trl_note, logit_diff, mode, prof)
    print(text)
    if not a.no_write:
        names = TABLE_RECORDS[:3 if a.profile else 2]
        text, records = docsection.record_tables(text, names, "measured", cmd, backend="cpu")
        docsection.write_section(SECTION, text, DOCS, records=records)
        print(f"wrote section {SECTION!r} of {os.path.normpath(DOCS)} and records "
              f"{[r['name'] for r in records]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
