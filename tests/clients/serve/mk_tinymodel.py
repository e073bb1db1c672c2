# SPDX-License-Identifier: Apache-2.0
"""Write a tiny random Llama (2 layers, head_dim 64, bf16) with an offline-
trained byte-level BPE tokenizer into OUT_DIR.  Nothing is downloaded.

The weights are real random weights (std 0.2) saved as safetensors: vLLM's
--load-format dummy initialises in [-1e-3, 1e-3], which makes every logit ~0
and greedy output independent of the KV cache, so it cannot show a wrong KV.
"""
import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
corpus = [
    "The quick brown fox jumps over the lazy dog.",
    "kvfs is a FUSE filesystem that stores KV cache blocks for vLLM.",
    "Hello, how are you today? I am fine, thank you.",
    "user assistant system: answer the question briefly.",
] * 50 + [" ".join(chr(c) for c in range(32, 127))]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(
    vocab_size=1000, special_tokens=["<s>", "</s>", "<pad>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                               eos_token="</s>", pad_token="<pad>")
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                      "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
fast.save_pretrained(out)

cfg = LlamaConfig(
    hidden_size=256, intermediate_size=512, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1024,
    max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
    hidden_act="silu", tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
    initializer_range=0.2)
torch.manual_seed(0)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
json.dump({"bos_token_id": 0, "eos_token_id": 1},
          open(os.path.join(out, "generation_config.json"), "w"))
print("tiny model written to", out)
