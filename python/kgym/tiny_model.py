"""A small causal language model made locally, nothing downloaded: a
byte-level BPE tokenizer trained with the `tokenizers` package on the
project's own text (problems/, harness/, docs/, the prompt templates of
lib/prompt_text.c) and a Llama of random weights from transformers, saved
where AutoTokenizer and AutoModelForCausalLM load it.

    scripts/tiny-model OUTDIR [--size toy|small] [--seed S]

Sizes: `toy` (CI on a CPU: a 2048-token vocabulary, 2 layers of width 64,
under a million parameters) and `small` (one GPU: 8192 tokens, 8 layers
of width 512, about 30 million parameters). The chat template renders
`<|role|>\\ncontent<|end|>\\n` blocks; `<|end|>` is the EOS token, so a
model trained on chats learns to stop after its answer.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = {
    # vocab, hidden, layers, heads, kv heads, intermediate
    "toy": dict(vocab=2048, hidden=64, layers=2, heads=4, kv=2, inter=128),
    "small": dict(vocab=8192, hidden=512, layers=8, heads=8, kv=8, inter=1408),
}
CONTEXT = 8192  # tokens: a 3-turn chat of a GPU problem fits
SPECIAL = ["<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|pad|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SOURCES = ("problems", "harness", "docs")
EXTS = (".py", ".md")


def corpus_files(root: str = ROOT) -> list[str]:
    """The project's text the tokenizer learns from, in a fixed order (so
    the same tree gives the same tokenizer)."""
    out = []
    for top in SOURCES:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            out += [os.path.join(d, f) for f in sorted(files) if f.endswith(EXTS)]
    prompts = os.path.join(root, "lib", "prompt_text.c")
    if os.path.exists(prompts):
        out.append(prompts)
    if not out:
        raise SystemExit(f"tiny-model: no text under {root}/{{{','.join(SOURCES)}}}")
    return out


def _texts(files: list[str]):
    for p in files:
        with open(p, encoding="utf-8", errors="replace") as f:
            yield f.read()


def build(out: str, size: str = "toy", seed: int = 0, root: str = ROOT) -> dict:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM,
                              PreTrainedTokenizerFast)

    s = SIZES[size]
    files = corpus_files(root)
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(_texts(files), trainers.BpeTrainer(
        vocab_size=s["vocab"], special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|end|>", pad_token="<|pad|>",
                                  model_max_length=CONTEXT)
    tok.chat_template = CHAT_TEMPLATE
    os.makedirs(out, exist_ok=True)
    tok.save_pretrained(out)

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=s["hidden"],
                      intermediate_size=s["inter"], num_hidden_layers=s["layers"],
                      num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
                      max_position_embeddings=CONTEXT, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, bos_token_id=None,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(out)
    info = {"size": size, "params": sum(p.numel() for p in model.parameters()),
            "vocab": len(tok), "layers": s["layers"], "hidden": s["hidden"],
            "corpus_files": len(files), "seed": seed}
    with open(os.path.join(out, "tiny_model.json"), "w") as f:
        json.dump(info, f, indent=1)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tiny-model", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", metavar="OUTDIR")
    ap.add_argument("--size", choices=sorted(SIZES), default="toy")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    info = build(a.out, a.size, a.seed)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
