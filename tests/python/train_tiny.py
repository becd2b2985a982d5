"""A tiny randomly initialised causal LM and its tokenizer, built locally
for the trainer's tests (nothing is downloaded): a byte-level BPE trained
on a few strings and a 2-layer Llama of hidden size 32."""
from __future__ import annotations

import json
import os

CORPUS = [
    "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return torch.relu(x)\n",
    "Here is my kernel. It should be faster. I fuse the op into one loop.",
    "<|system|>\nYou write fast kernels.\n<|user|>\nWrite a kernel.\n<|assistant|>\n",
    "Verdict: pass. Speedup 1.5x. The program was not evaluated.",
]


def make_tiny(path: str, dtype: str = "float32", vocab_pad: int = 0, seed: int = 0,
              chat_template: str | None = None, arch: str = "llama") -> str:
    """Writes tokenizer and model to path; the model's vocabulary is the
    tokenizer's plus vocab_pad spare ids. arch "gpt2" for float64 checks:
    Llama's RMSNorm computes in float32 whatever the model's dtype."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                              PreTrainedTokenizerFast)

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(CORPUS, tr)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>")
    if chat_template:
        tok.chat_template = chat_template
    tok.save_pretrained(path)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok) + vocab_pad, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=False)
    if arch == "gpt2":
        cfg = GPT2Config(vocab_size=len(tok) + vocab_pad, n_embd=32, n_layer=2, n_head=4,
                         n_positions=1024, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=False)
        model = GPT2LMHeadModel(cfg).to(getattr(torch, dtype))
    else:
        model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(path)
    return path


def row(problem: str, sample: int, turn: int, reply: str | None, adv_trloo, adv_grpo,
        valid: bool = True, keep: bool = True, loss_mask: bool = True, reward=1.0,
        token_ids=None, logprobs=None, messages=None) -> dict:
    """A kgym rollout row (docs/agent.md) with the fields the trainer reads."""
    return {"schema": "kgym.rollout/1", "trajectory_id": f"{problem}:{sample}",
            "problem": problem, "sample": sample, "turn": turn,
            "messages": messages or [{"role": "system", "content": "You write fast kernels."},
                                     {"role": "user", "content": f"Write a kernel for {problem}."}],
            "context": [], "reply": reply, "finish_reason": "stop", "code": None,
            "token_ids": token_ids, "logprobs": logprobs, "usage": None, "task_id": None,
            "result": None, "feedback": None, "error": None, "valid": valid,
            "reward": reward if valid else None, "return": reward if valid else None,
            "advantage_trloo": adv_trloo, "advantage_grpo": adv_grpo,
            "keep": keep, "keep_prob": 1.0, "loss_mask": loss_mask, "best_turn": None}


def write_rows(path: str, rows: list[dict]) -> str:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def params(path: str) -> dict:
    """The model's tensors as saved (safetensors)."""
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))
