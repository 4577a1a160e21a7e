"""Session 47's compiled-natives check summarised again by fk check's rules as of the commit after the hold: a ratio
whose time holds launch work left out of its slot's figures, and the passthrough's compiled-mode prediction "stock".
Its per-shape timings are the hold's, unchanged. The hold's fk did not record ``engine_own``: it is set here for the
passthrough plugin, whose kernels are the engine's own (plugins/fk-passthrough). From the repository root:

    .venv/bin/python reports/gpu/s47-h100/rejudge.py
"""
import json
import os

from fk_adapters.check import runner
from fk_adapters.check.report import render_check

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "i31", "vllm", "check-fk46-llama-3.1")
OUT = os.path.join(HERE, "i31", "vllm", "check-fk46-llama-3.1-rejudged")

results = json.load(open(os.path.join(SRC, "results.json")))
flag_speedup = results["config"].get("flag_speedup", runner.FLAG_SPEEDUP)
for i, s in enumerate(results["slots"]):
    ceiling = s.get("copy_ceiling_Bps", 0.0)
    shapes = [dict(r, flags=[f for f in r.get("flags", []) if f not in runner.flags(r, ceiling, flag_speedup)])
              for r in s["shapes"]]  # the driver's own flags; summarise adds its own again
    res = {"status": "ok", "copy_ceiling_Bps": ceiling, "compiled_baseline": s.get("compiled_baseline"),
           "engine_own": s["plugin"] == "passthrough", "shapes": shapes}
    results["slots"][i] = {**s, **runner.summarise(res, flag_speedup, results["config"]["mode"])}
results["command"] = "reports/gpu/s47-h100/rejudge.py (the hold's: " + results["command"] + ")"
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
with open(os.path.join(OUT, "report.md"), "w") as f:
    f.write(render_check(results))
print(f"wrote {OUT}/report.md")
