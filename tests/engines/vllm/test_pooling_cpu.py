"""Embedding models in vLLM's pooling runner on CPU: tiny-bge-m3 (XLM-RoBERTa as BGE-M3), passthrough gives the stock
embeddings bit for bit with the gemm slot proven, fk-wrong's wrong-gemm fails the output diff; tiny-colbertv2 (one
vector per token), wrong-gemm fails. Marked `engine`."""
import importlib.util

import pytest

from tests.engines.vllm.test_vllm_cpu import fk_run

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]


def test_passthrough_embeds_bit_for_bit_and_a_wrong_gemm_fails(tmp_path):
    (tmp_path / "pass").mkdir()
    p, res = fk_run(tmp_path / "pass", "--plugins", "passthrough", "--scenario", "tiny-bge-m3", "--correctness-only",
                    "--allow-uncovered")
    assert res is not None, p.stderr[-3000:]
    (row,) = res["scenarios"]
    assert row["status"] == "PASSED", row.get("failures")
    emb = row["correctness"]["outputs"]["embedding"]
    assert emb["shape"] == [2, 64] and emb["max_abs"] == 0.0
    gemm = row["evidence"]["slots"]["gemm"]
    assert gemm["status"] == "exercised" and gemm["calls"] > 0
    (tmp_path / "wrong").mkdir()
    first = tmp_path / "pass"
    p, res = fk_run(tmp_path / "wrong", "--plugins", "wrong-gemm", "--scenario", "tiny-bge-m3", "--correctness-only",
                    "--model-cache", str(first / "models"), "--baseline-from", str(first / "out"))
    assert res is not None, p.stderr[-3000:]
    (row,) = res["scenarios"]
    assert row["baseline"].get("reused_from") and row["status"] == "INCORRECT", row.get("failures")


def test_colbert_token_embeddings_a_wrong_gemm_fails(tmp_path):
    """ColBERT through vLLM's pooling runner (token_embed): one 16-wide vector per token; fk-wrong's gemm in its BERT
    layers moves every one of them and the diff fails it."""
    p, res = fk_run(tmp_path, "--plugins", "wrong-gemm", "--scenario", "tiny-colbertv2", "--correctness-only",
                    "--allow-uncovered")
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert row["status"] == "INCORRECT", row.get("failures")
    assert row["correctness"]["outputs"]["embedding"]["shape"] == [2, 32, 16]
    assert row["evidence"]["slots"]["gemm"]["calls"] > 0
