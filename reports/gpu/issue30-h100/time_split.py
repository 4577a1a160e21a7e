"""Where the device time went in this hold's Triton A/B (fk46-llama-3.1, compiled + CUDA graphs), from the profiled
step each side's result.json kept: `python reports/gpu/issue30-h100/time_split.py` (writes time_split.md beside it)."""
import json
from pathlib import Path

from fk_adapters import time_split

HERE = Path(__file__).parent
LOGS = HERE / "vllm" / "ab-triton" / "logs" / "fk46-llama-3.1"
side = {s: json.loads((LOGS / s / "result.json").read_text()).get("profile") for s in ("baseline", "candidate")}
split = time_split.split(side["baseline"], side["candidate"])
(HERE / "time_split.md").write_text("\n".join(["# Where the device time went: Triton vs. stock vLLM, fk46-llama-3.1", "",
                                               f"`python {Path(__file__).relative_to(HERE.parents[2])}`", ""]
                                              + time_split.markdown("fk46-llama-3.1", split)))
print((HERE / "time_split.md").read_text())
