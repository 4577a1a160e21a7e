"""Offline verdict of the wrong-moe run that the end of the GPU hold stopped: fk's own correctness rules
(fk_adapters.metrics, as `fk run` applies them) on the candidate's kept correctness results (partial.json) against
ab-triton's baseline and float32 reference runs of the same job; the Triton candidate re-judged the same way.
Run from this folder: python rejudge.py ENGINE > ENGINE/wrong-moe-offline-verdict.txt (ENGINE: vllm or sglang)"""
import json
import sys

from fk_adapters import metrics

E = sys.argv[1]
L = f"{E}/ab-triton/logs/fk46-mixtral/"
base = json.load(open(L + "baseline/result.json"))
ref = json.load(open(L + ("reference-transformers" if E == "sglang" else "reference") + "/result.json"))
for name, path in (("triton (re-judged)", L + "candidate/result.json"),
                   ("wrong-moe (stopped in its throughput phase)",
                    f"{E}/ab-wrong-moe/logs/fk46-mixtral/candidate/partial.json")):
    cand = json.load(open(path))
    out = metrics.with_reference(metrics.correctness(base, cand, "bfloat16"),
                                 metrics.reference_correctness(base, cand, ref))
    print(f"{name}: passed={out['passed']}")
    print("  " + out["summary"])
    for f in out["failures"][:4]:
        print("  - " + f)
