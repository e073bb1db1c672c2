# SPDX-License-Identifier: Apache-2.0
"""Multi-round greedy chats against a vLLM OpenAI server on 127.0.0.1.

usage: chat_rounds.py PORT OUT.json
Three conversations of three rounds share a long system prompt, so later
requests reuse KV blocks.  Records text, cached prompt tokens and the
per-token logprobs (top 3) of every reply.
"""
import json
import sys
import urllib.request

port, out = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}/v1/chat/completions"
sysmsg = ("system: You are a terse assistant. kvfs is a FUSE filesystem that stores "
          "KV cache blocks for vLLM. " * 12)
results = []
for conv in range(3):
    msgs = [{"role": "system", "content": sysmsg + f" conversation {conv}"}]
    for rnd in range(3):
        msgs.append({"role": "user", "content": f"Hello, round {rnd} of chat {conv}: "
                     "how are you today? The quick brown fox jumps over the lazy dog."})
        body = {"model": "tiny", "messages": msgs, "max_tokens": 24, "temperature": 0,
                "seed": 0, "logprobs": True, "top_logprobs": 3}
        req = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            resp = json.load(r)
        choice = resp["choices"][0]
        text = choice["message"]["content"]
        lps = [[t["token"], t["logprob"], [(x["token"], x["logprob"]) for x in t["top_logprobs"]]]
               for t in choice["logprobs"]["content"]]
        usage = resp.get("usage", {})
        results.append({"conv": conv, "round": rnd, "text": text, "logprobs": lps,
                        "prompt_tokens": usage.get("prompt_tokens"),
                        "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens")})
        msgs.append({"role": "assistant", "content": text})
json.dump(results, open(out, "w"), indent=1)
for r in results:
    print(f"conv {r['conv']} round {r['round']}: prompt {r['prompt_tokens']} "
          f"cached {r['cached']} first logprob {r['logprobs'][0][1]:.6f}")
