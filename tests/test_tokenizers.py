"""Tokenizers: sentencepiece train/load round trip, HF tokenizer.json round trip, special ids,
prompt templates (expected strings written out by hand), the `tseeds tokenizer` CLI."""

import json
import os

import pytest

from tseeds_jax.data import templates
from tseeds_jax.data.fixtures import TOKENIZER_CORPUS
from tseeds_jax.data.tokenizer import HFTokenizer, SentencePieceTokenizer, load_tokenizer
from tseeds_jax.data.tokenizer_train import train_hf_bpe, train_sentencepiece

QWEN_SPECIALS = templates.template_special_tokens("qwen_math")
R1_SPECIALS = templates.template_special_tokens("r1_distill")
# Text made only of characters in the corpus, with the awkward bits: double spaces, a leading
# space, newlines, trailing space.
COVERED = " Question: What is  12 + 7?\nAnswer:\n\n$\\boxed{19}$ "


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("sp") / "tok.model"
    tok = train_sentencepiece(TOKENIZER_CORPUS, vocab_size=200, model_type="unigram",
                              special_tokens=QWEN_SPECIALS + R1_SPECIALS,
                              stop_tokens=("<|im_end|>",), out=path)
    return path, tok


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf")
    train_hf_bpe(TOKENIZER_CORPUS, vocab_size=300, out_dir=out,
                 special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"),
                 eos_token="<|endoftext|>", pad_token="<|pad|>")
    return out


# --- sentencepiece ----------------------------------------------------------------------------
def test_sentencepiece_train_load_round_trip(sp_model):
    path, trained = sp_model
    loaded = load_tokenizer(path)
    assert isinstance(loaded, SentencePieceTokenizer)
    assert loaded.vocab_size == trained.vocab_size <= 200
    ids = loaded.encode(COVERED)
    assert ids == trained.encode(COVERED)
    assert loaded.decode(ids) == COVERED
    assert all(0 <= i < loaded.vocab_size for i in ids)
    assert loaded.unk_id not in ids


def test_sentencepiece_special_ids(sp_model):
    _, tok = sp_model
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 2, 3)
    assert tok.id_to_token(tok.eos_id) == "</s>" and tok.id_to_token(tok.bos_id) == "<s>"
    im_end = tok.token_to_id("<|im_end|>")
    assert im_end is not None and tok.stop_ids == (3, im_end)
    ids = tok.encode("hi", add_bos=True, add_eos=True)
    assert ids[0] == 2 and ids[-1] == 3
    # Control symbols written as text are ordinary characters, never the control ids.
    assert 3 not in tok.encode("</s>")
    # Template tokens written as text are single pieces.
    assert tok.encode("<|im_start|>") == [tok.token_to_id("<|im_start|>")]
    assert tok.decode(tok.encode("a<|im_end|>b")) == "a<|im_end|>b"
    assert tok.decode(tok.encode("a<|im_end|>b") + [3], skip_special_tokens=True) == "ab"


@pytest.mark.parametrize("model_type,vocab_size", [("char", 90), ("bpe", 150), ("char", 40)])
def test_sentencepiece_small_vocab_options(model_type, vocab_size):
    tok = train_sentencepiece(TOKENIZER_CORPUS, vocab_size=vocab_size, model_type=model_type)
    assert tok.vocab_size <= vocab_size
    text = "What is 12 + 7?\nAnswer: 19"
    ids = tok.encode(text)
    if vocab_size < 60:  # fewer pieces than the corpus has characters: some become <unk>
        assert tok.unk_id in ids
        return
    assert tok.unk_id not in ids and tok.decode(ids) == text
    if model_type == "char":
        assert len(ids) == len(text)  # one id per character


def test_sentencepiece_byte_fallback_round_trips_unseen_text():
    tok = train_sentencepiece(TOKENIZER_CORPUS, vocab_size=400, byte_fallback=True)
    text = "naïve café — 東京 ✓"
    ids = tok.encode(text)
    assert tok.unk_id not in ids and tok.decode(ids) == text


def test_sentencepiece_training_errors():
    with pytest.raises(ValueError, match="vocab_size"):
        train_sentencepiece(TOKENIZER_CORPUS, vocab_size=4)
    with pytest.raises(ValueError, match="model_type"):
        train_sentencepiece(TOKENIZER_CORPUS, vocab_size=64, model_type="wordpiece")
    with pytest.raises(ValueError, match="no non-empty line"):
        train_sentencepiece(["", "\n"], vocab_size=64)
    with pytest.raises(ValueError, match="stop_tokens"):
        train_sentencepiece(TOKENIZER_CORPUS, vocab_size=64, stop_tokens=("<|im_end|>",))


def test_sentencepiece_is_deterministic():
    a = train_sentencepiece(TOKENIZER_CORPUS, vocab_size=120)
    b = train_sentencepiece(TOKENIZER_CORPUS, vocab_size=120)
    assert a.serialized_proto() == b.serialized_proto()


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_tokenizer(tmp_path / "missing.model")
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="bad.model"):
        load_tokenizer(bad)
    with pytest.raises(ValueError, match="neither tokenizer.json"):
        load_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="cannot tell"):
        load_tokenizer(tmp_path / "x.bin")


# --- HF tokenizer.json --------------------------------------------------------------------------
def test_hf_round_trip_any_text(hf_dir):
    tok = load_tokenizer(hf_dir)
    assert isinstance(tok, HFTokenizer)
    for text in (COVERED, "naïve café — 東京 ✓", "  \n\t x", ""):
        assert tok.decode(tok.encode(text)) == text


def test_hf_special_ids(hf_dir):
    tok = HFTokenizer(hf_dir / "tokenizer.json")
    # BpeTrainer puts special tokens first, in the order given.
    assert (tok.eos_id, tok.pad_id, tok.bos_id) == (0, 3, None)
    assert tok.token_to_id("<|im_start|>") == 1 and tok.token_to_id("<|im_end|>") == 2
    assert tok.encode("a<|im_end|>b")[1] == 2 and len(tok.encode("<|im_end|>")) == 1
    assert tok.decode(tok.encode("a<|im_end|>b"), skip_special_tokens=True) == "ab"
    with pytest.raises(ValueError, match="no BOS"):
        tok.encode("x", add_bos=True)
    assert tok.encode("x", add_eos=True)[-1] == 0
    with pytest.raises(ValueError, match="outside"):
        tok.decode([tok.vocab_size])


def test_hf_generation_config_adds_stop_ids(hf_dir, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": {"content": "<|im_end|>"}, "bos_token": None}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    tok = load_tokenizer(folder)
    assert tok.eos_id == 2 and tok.stop_ids == (2, 0)
    assert tok.pad_id == tok.token_to_id("<|pad|>")  # not in the config: found by its name


def test_hf_unknown_eos_is_an_error(hf_dir):
    with pytest.raises(ValueError, match="eos_token '<nope>' is not in the vocabulary"):
        HFTokenizer(hf_dir, eos_token="<nope>")


# --- templates ----------------------------------------------------------------------------------
Q = "What is $1+1$?"
BOXED = "Please reason step by step, and put your final answer within \\boxed{}."


def test_template_strings():
    assert templates.get_template("qwen_math").render(Q) == (
        "<|im_start|>system\n" + BOXED + "<|im_end|>\n"
        "<|im_start|>user\nWhat is $1+1$?<|im_end|>\n<|im_start|>assistant\n")
    assert templates.get_template("qwen_chat_boxed").render(Q) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is $1+1$?\n" + BOXED + "<|im_end|>\n<|im_start|>assistant\n")
    assert templates.get_template("r1_distill").render(Q) == (
        "<｜User｜>What is $1+1$?\n" + BOXED + "<｜Assistant｜><think>\n")
    assert templates.get_template("qwen3_thinking").render(Q) == (
        "<|im_start|>user\nWhat is $1+1$?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert templates.get_template("plain").render(Q) == "Question: What is $1+1$?\nAnswer:"
    assert templates.get_template("raw").render(Q) == Q
    with pytest.raises(ValueError, match="unknown prompt template"):
        templates.get_template("llama9")


def test_render_chat_multi_turn():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}]
    assert templates.render_chat(msgs, "deepseek_r1") == (
        "S<｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜><｜User｜>V<｜Assistant｜>")
    assert templates.render_chat(msgs[:2], "chatml", add_generation_prompt=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n")
    with pytest.raises(ValueError, match="message 0"):
        templates.render_chat([{"role": "tool", "content": "x"}], "chatml")


def test_encode_prompt_is_token_exact_hf(hf_dir):
    tok = load_tokenizer(hf_dir)
    start, end = tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")
    # Expected ids assembled piece by piece: special tokens are single ids that split the text.
    expected = ([start] + tok.encode("system\n" + BOXED) + [end] + tok.encode("\n")
                + [start] + tok.encode("user\n" + Q) + [end] + tok.encode("\n")
                + [start] + tok.encode("assistant\n"))
    ids = templates.encode_prompt(tok, "qwen_math", Q)
    assert ids == expected
    assert tok.decode(ids) == templates.get_template("qwen_math").render(Q)
    assert templates.stop_token_ids(tok, "qwen_math") == (0, end)  # <|endoftext|> is EOS
    with pytest.raises(ValueError, match="not single entries"):
        templates.encode_prompt(tok, "r1_distill", Q)


def test_encode_prompt_sentencepiece_r1_adds_bos(sp_model):
    _, tok = sp_model
    ids = templates.encode_prompt(tok, "r1_distill", "What is 12 + 7?")
    assert ids[0] == tok.bos_id
    assert tok.token_to_id("<｜User｜>") == ids[1]
    tail = tok.encode("<｜Assistant｜><think>\n")  # a user-defined symbol splits the text
    assert ids[-len(tail):] == tail
    assert tok.decode(ids) == templates.get_template("r1_distill").render("What is 12 + 7?")
    assert templates.stop_token_ids(tok, "r1_distill") == (
        tok.eos_id, tok.token_to_id("<|im_end|>"), tok.token_to_id("<｜end▁of▁sentence｜>"))
    plain = templates.encode_prompt(tok, "plain", "hi")  # BOS when the tokenizer has one
    assert plain[0] == tok.bos_id
    count = templates.prompt_token_counter(tok, "plain")
    assert count("hi") == len(plain)


# --- CLI ----------------------------------------------------------------------------------------
def test_cli_train_and_inspect(tmp_path, capsys):
    from tseeds_jax import cli

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TOKENIZER_CORPUS), encoding="utf-8")
    out = tmp_path / "cli.model"
    assert cli.main(["tokenizer", "train", "--input", str(corpus), "--vocab-size", "120",
                     "--out", str(out), "--template", "qwen_math"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert os.path.isfile(out) and info["eos_id"] == 3 and info["vocab_size"] <= 120
    assert cli.main(["tokenizer", "inspect", str(out), "--text", "What is 1?",
                     "--template", "qwen_math"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["round_trip"] is True and info["pieces"][:2] == ["<s>", "<|im_start|>"]
    assert cli.main(["tokenizer", "train", "--input", str(tmp_path / "none.txt"),
                     "--vocab-size", "50", "--out", str(out)]) == 1
    assert "none.txt" in capsys.readouterr().err
