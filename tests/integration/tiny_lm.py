"""A tiny randomly initialised causal LM written to a directory, for
test_real_policy.py: a byte-level BPE tokenizer trained here on a few
strings (English and Python), with a chat template, and a 2-layer Llama
of hidden size 32 with random weights. Nothing is downloaded.

    python tiny_lm.py DIR         # writes config, weights, tokenizer to DIR
    python tiny_lm.py count DIR   # stdin: a JSON list of chats; stdout: the
                                  # prompt length in tokens of each, as the
                                  # server's chat template makes it
"""
from __future__ import annotations

import sys

# What the tokenizer is trained on: prose and the characters of Python
# kernels, so that prompts encode to few tokens.
CORPUS = [
    "You write fast GPU kernels. Here is the reference program and its feedback.",
    "Your program was not evaluated: your reply has no fenced code block.",
    "```python\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, x):\n        return torch.relu(x) * 0.5 + x[0, :] - {1: 2}\n```\n",
    "def get_inputs():\n    return [torch.randn(16, 1024)]\n\ndef get_init_inputs():\n"
    "    return []\n",
    "@triton.jit\ndef kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
    "    pid = tl.program_id(0); offs = pid * BLOCK + tl.arange(0, BLOCK)\n",
]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SPECIAL = ["<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|pad|>"]


def build(path: str, vocab: int = 400, seed: int = 0) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM,
                              PreTrainedTokenizerFast)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>",
                                   pad_token="<|pad|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32,
                      intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=16384,
                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      bos_token_id=None, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.generation_config = GenerationConfig(
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        do_sample=True, max_new_tokens=32)
    model.save_pretrained(path)


def count(path: str, chats: list) -> list[int]:
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    return [len(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                        return_dict=True)["input_ids"]) for c in chats]


if __name__ == "__main__":
    if sys.argv[1] == "count":
        import json
        print(json.dumps(count(sys.argv[2], json.load(sys.stdin))))
    else:
        build(sys.argv[1])
