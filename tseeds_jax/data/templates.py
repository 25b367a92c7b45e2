"""Prompt templates: a dataset prompt (plain text) -> the exact string/ids the policy sees.

Templates are written out in Python (no Jinja) so that the text is fixed and reviewable:
- `qwen_math`: Qwen2.5-Math's recommended chain-of-thought setting, the ChatML format with the
  system message "Please reason step by step, and put your final answer within \\boxed{}."
- `qwen_chat_boxed`: ChatML with Qwen2.5's default system message and the boxed instruction
  appended to the user turn (the form most RL recipes use for Qwen2.5 instruct models).
- `r1_distill`: DeepSeek-R1-Distill format: BOS, `<｜User｜>` question + boxed instruction,
  `<｜Assistant｜><think>\\n` (DeepSeek recommends the instruction in the user turn, no system
  message, and starting the answer with `<think>\\n`).
- `qwen3_thinking`: ChatML with no system message and the answer opened with `<think>\\n` (as the
  Qwen3-*-Thinking-2507 chat template does); used for the code setting.
- `plain`: "Question: ...\\nAnswer:" for tiny models trained from scratch; BOS if the tokenizer has
  one.
- `raw`: the prompt unchanged.

Encoding the rendered string recognises the template's special tokens as single ids (see
`tokenizer.py`), which is how HF tokenizes the output of `apply_chat_template`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tseeds_jax.data.tokenizer import Tokenizer

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
QWEN_DEFAULT_SYSTEM = "You are a helpful assistant."

_CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
_R1_TOKENS = ("<｜User｜>", "<｜Assistant｜>")
_R1_EOS = "<｜end▁of▁sentence｜>"

CHAT_STYLES = ("chatml", "deepseek_r1", "plain", "none")


def render_chat(messages: Sequence[Mapping[str, str]], style: str, *,
                add_generation_prompt: bool = True, generation_prefix: str = "") -> str:
    """Render chat `messages` ([{"role": "system"|"user"|"assistant", "content": str}, ...]) in a
    chat `style` (one of CHAT_STYLES). With `add_generation_prompt` the text ends where the
    assistant's answer starts, followed by `generation_prefix` (e.g. "<think>\\n")."""
    if style not in CHAT_STYLES:
        raise ValueError(f"render_chat: style {style!r} not in {CHAT_STYLES}")
    parts: list[str] = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ("system", "user", "assistant") or not isinstance(content, str):
            raise ValueError(f"render_chat: message {i} needs role system/user/assistant and "
                             f"str content, got role={role!r} content={type(content).__name__}")
        if style == "chatml":
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        elif style == "deepseek_r1":
            parts.append({"system": content, "user": f"<｜User｜>{content}",
                          "assistant": f"<｜Assistant｜>{content}{_R1_EOS}"}[role])
        elif style == "plain":
            parts.append({"system": f"{content}\n\n", "user": f"Question: {content}\n",
                          "assistant": f"Answer: {content}\n"}[role])
        else:
            parts.append(content)
    if add_generation_prompt:
        parts.append({"chatml": "<|im_start|>assistant\n", "deepseek_r1": "<｜Assistant｜>",
                      "plain": "Answer:", "none": ""}[style])
        parts.append(generation_prefix)
    return "".join(parts)


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
    """How a dataset prompt becomes model input.

    `add_bos`: True = always (error if the tokenizer has no BOS), None = if the tokenizer has one,
    False = never. `special_tokens`: template tokens that must be single vocabulary entries.
    `stop_tokens`: tokens that end the answer besides the tokenizer's EOS (used when present in
    the vocabulary).
    """

    name: str
    style: str
    system: str | None = None
    user_suffix: str = ""
    generation_prefix: str = ""
    add_bos: bool | None = None
    special_tokens: tuple[str, ...] = ()
    stop_tokens: tuple[str, ...] = ()

    def messages(self, prompt: str) -> list[dict[str, str]]:
        msgs = [] if self.system is None else [{"role": "system", "content": self.system}]
        msgs.append({"role": "user", "content": prompt + self.user_suffix})
        return msgs

    def render(self, prompt: str) -> str:
        """The exact input text for `prompt` (without BOS, which `encode_prompt` adds as an id)."""
        if not isinstance(prompt, str):
            raise TypeError(f"template {self.name!r}: prompt must be str, got "
                            f"{type(prompt).__name__}")
        return render_chat(self.messages(prompt), self.style,
                           generation_prefix=self.generation_prefix)


TEMPLATES: dict[str, PromptTemplate] = {t.name: t for t in (
    PromptTemplate("qwen_math", "chatml", system=BOXED_INSTRUCTION,
                   special_tokens=_CHATML_TOKENS, stop_tokens=("<|im_end|>", "<|endoftext|>")),
    PromptTemplate("qwen_chat_boxed", "chatml", system=QWEN_DEFAULT_SYSTEM,
                   user_suffix="\n" + BOXED_INSTRUCTION, special_tokens=_CHATML_TOKENS,
                   stop_tokens=("<|im_end|>", "<|endoftext|>")),
    PromptTemplate("r1_distill", "deepseek_r1", user_suffix="\n" + BOXED_INSTRUCTION,
                   generation_prefix="<think>\n", add_bos=True, special_tokens=_R1_TOKENS,
                   stop_tokens=(_R1_EOS,)),
    PromptTemplate("qwen3_thinking", "chatml", generation_prefix="<think>\n",
                   special_tokens=_CHATML_TOKENS, stop_tokens=("<|im_end|>", "<|endoftext|>")),
    PromptTemplate("plain", "plain"),
    PromptTemplate("raw", "none", add_bos=False),
)}


def get_template(template: str | PromptTemplate) -> PromptTemplate:
    if isinstance(template, PromptTemplate):
        return template
    if template not in TEMPLATES:
        raise ValueError(f"unknown prompt template {template!r}; known: {sorted(TEMPLATES)}")
    return TEMPLATES[template]


def register_template(template: PromptTemplate) -> None:
    if template.style not in CHAT_STYLES:
        raise ValueError(f"register_template: style {template.style!r} not in {CHAT_STYLES}")
    TEMPLATES[template.name] = template


def template_special_tokens(template: str | PromptTemplate) -> tuple[str, ...]:
    """Every special string a template writes: what a tokenizer trained for it must hold."""
    t = get_template(template)
    return tuple(dict.fromkeys((*t.special_tokens, *t.stop_tokens)))


def encode_prompt(tokenizer: Tokenizer, template: str | PromptTemplate, prompt: str, *,
                  strict: bool = True) -> list[int]:
    """Token ids of `prompt` rendered by `template`, BOS included per `template.add_bos`.

    With `strict`, a template token that is not one vocabulary entry raises ValueError (the
    model would otherwise see it spelled out as ordinary text)."""
    t = get_template(template)
    if strict:
        missing = [tok for tok in t.special_tokens if tokenizer.token_to_id(tok) is None]
        if missing:
            raise ValueError(f"template {t.name!r} needs tokens {missing} that are not single "
                             f"entries of the tokenizer vocabulary")
    add_bos = tokenizer.bos_id is not None if t.add_bos is None else t.add_bos
    return tokenizer.encode(t.render(prompt), add_bos=add_bos)


def stop_token_ids(tokenizer: Tokenizer, template: str | PromptTemplate) -> tuple[int, ...]:
    """Ids that end generation under `template`: the tokenizer's stop ids plus the template's
    stop tokens that exist in the vocabulary."""
    t = get_template(template)
    extra = [tokenizer.token_to_id(s) for s in t.stop_tokens]
    return tuple(dict.fromkeys([*tokenizer.stop_ids, *(i for i in extra if i is not None)]))


def prompt_token_counter(tokenizer: Tokenizer, template: str | PromptTemplate):
    """`prompt -> number of ids` under `template`; the length used for max-prompt-length checks."""
    t = get_template(template)
    return lambda prompt: len(encode_prompt(tokenizer, t, prompt, strict=False))
