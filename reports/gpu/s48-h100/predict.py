"""Session 48's check with the run it predicts, added by fk check's rule as of the commit after the hold
(``check/prediction.py``): each slot's predicting speedup weighted by its share of session 47's capture's device
time. The per-slot results are the hold's, unchanged. From the repository root:

    .venv/bin/python reports/gpu/s48-h100/predict.py
"""
import json
import os

from fk_adapters.check import prediction
from fk_adapters.check.report import render_check

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "i31", "vllm", "check-fk46-llama-3.1")
OUT = os.path.join(HERE, "i31", "vllm", "check-fk46-llama-3.1-predicted")
CAPTURE = os.path.join(HERE, "..", "s47-h100", "i31", "vllm", "fk46", "fk46-llama-3.1", "vllm.json")

with open(os.path.join(SRC, "results.json")) as f:
    results = json.load(f)
with open(CAPTURE) as f:
    workload = json.load(f)
results["run_predictions"] = prediction.run_predictions(results["slots"], [workload])
results["command"] = "reports/gpu/s48-h100/predict.py (the hold's: " + results["command"] + ")"
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
with open(os.path.join(OUT, "report.md"), "w") as f:
    f.write(render_check(results))
for p in results["run_predictions"]:
    print(f"{p['workload']} {p['plugin']}: predicted run speedup {p['speedup']:.3f}")
