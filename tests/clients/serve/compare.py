# SPDX-License-Identifier: Apache-2.0
"""usage: compare.py A.json B.json [--expect-differ]
Exit 0 when texts and all logprobs are identical (or, with --expect-differ,
when they are not)."""
import json
import sys

a, b = (json.load(open(p)) for p in sys.argv[1:3])
expect_differ = "--expect-differ" in sys.argv
same_text = len(a) == len(b) and all(x["text"] == y["text"] for x, y in zip(a, b))
maxdiff = 0.0
for x, y in zip(a, b):
    for (_, la, topa), (_, lb, topb) in zip(x["logprobs"], y["logprobs"]):
        maxdiff = max(maxdiff, abs(la - lb), *(abs(p - q) for (_, p), (_, q) in zip(topa, topb)))
identical = same_text and maxdiff == 0.0
print(f"{sys.argv[1]} vs {sys.argv[2]}: texts identical={same_text} "
      f"max |logprob diff|={maxdiff:.3g} cached tokens={[r['cached'] for r in b]}")
sys.exit(0 if identical != expect_differ else 1)
