"""DLRMv2 in the transformers host on CPU: `fk run` of tiny-dlrmv2 loads torchrec's own DLRM_DCN (EmbeddingBag
tables, DCNv2 cross layers, MLPs of nn.Linear) from its seeded checkpoint and scores seeded multi-hot samples.
Passthrough gives the stock click logits bit for bit with gemm exercised in every nn.Linear (the tables and the cross
layers have no slot); fk-wrong's wrong-gemm fails it. Marked `engine` (about 1 min)."""
import subprocess
import sys

import pytest

from fk_adapters.engines.transformers.libraries import side_site
from tests.engines.transformers.test_transformers_cpu import passthrough_exact_and_wrong_gemm_fails

SCENARIO = "tiny-dlrmv2"
LINEARS = 5  # dense arch 13-32-16, over arch 80-32-16-1


pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(not all(side_site.installed(m) for m in ("torchrec", "fbgemm_gpu")),
                                 reason="torchrec or fbgemm_gpu is not installed (side site)")]


def test_passthrough_gives_the_stock_logits_and_a_wrong_gemm_fails(tmp_path):
    passthrough_exact_and_wrong_gemm_fails(tmp_path, SCENARIO, [4, 1], LINEARS)


def test_the_checkpoint_loads_back_and_the_samples_are_seeded(tmp_path):
    """Run in a child process (the side site stays off this one's path): the tables are capped and at unit-norm
    scale, no parameter is constant, the reloaded model gives the same logits, and the samples' ids fall in their
    tables."""
    code = f"""
import torch
from fk_adapters import scenarios
from fk_adapters.engines.transformers import libraries
sc = scenarios.load({SCENARIO!r}); mod = libraries.loader(sc.library)
mod.build_and_save(dict(sc.model), {str(tmp_path)!r}, sc.seed, "float32", "cpu")
job = {{"model_dir": {str(tmp_path)!r}, "dtype": "float32"}}
m, again = mod.load(job, "cpu"), mod.load(job, "cpu")
x = mod.batch(m, sc.inputs, 16, sc.seed, "cpu", torch.float32)
y = mod.batch(m, sc.inputs, 16, sc.seed, "cpu", torch.float32)
assert all(torch.equal(x[k], y[k]) for k in x)
assert x["sparse_lengths"].tolist() == [h for h in sc.model["multi_hot_sizes"] for _ in range(16)]
rows = mod.table_rows(sc.model)
assert rows == [100, 500, 50, 7]
ids = x["sparse_values"].split([16 * h for h in sc.model["multi_hot_sizes"]])
assert all(0 <= int(i.min()) and int(i.max()) < r for i, r in zip(ids, rows))
tables = m.model.sparse_arch.embedding_bag_collection.embedding_bags
assert [t.num_embeddings for t in tables.values()] == rows
dim = sc.model["embedding_dim"]  # tables at unit-norm scale, not torchrec's near-zero +-sqrt(1/rows)
assert all(0.8 < float(t.weight.std()) * dim ** 0.5 < 1.25 for t in tables.values())
assert all(p.numel() == 1 or bool((p != p.reshape(-1)[0]).any()) for p in m.parameters())
with torch.inference_mode():
    a, b = m(**x), again(**x)
assert a.shape == (16, 1) and torch.equal(a, b) and float(a.std()) > 0
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.split()[-1:] == ["ok"], (p.stdout[-3000:], p.stderr[-3000:])
