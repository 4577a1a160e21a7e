"""Re-judge session 28's SGLang TP=2 Triton candidate with fk's current evidence code, from the run's own committed
files (its result.json with each rank's profile, and the plugin-load records): per rank, the Triton kernels' launches.
Run from the repository root: python reports/gpu/s28-h100x4/rejudge_tp2.py > reports/gpu/s28-h100x4/rejudge_tp2.txt"""
import glob
import json
import os

from fk_adapters import evidence

RUN = os.path.join(os.path.dirname(__file__),
                   "i33/sglang/ab-triton-fk46-llama-3.1-tp2/logs/fk46-llama-3.1-tp2/candidate")
result = json.load(open(os.path.join(RUN, "result.json")))
loads = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(RUN, "loads", "*.json")))]
for slot, ev in evidence.judge(result, loads, "graphs")["slots"].items():
    per_rank = {r: e.get("profiler_hits") for r, e in (ev.get("ranks") or {}).items()}
    print(f"{slot}: {ev['status']}; {ev['proof']}; launches per rank {per_rank}")
