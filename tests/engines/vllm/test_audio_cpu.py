"""Whisper through vLLM's transcription path on CPU (tiny-whisper: decoder prompts, each with its own seeded clip):
passthrough gives the stock tokens and logprobs with its gemm and attention in the decoder proven; fk-wrong's
wrong-gemm fails the teacher-forced diff. Marked `engine`."""
import importlib.util

import pytest

from tests.engines.vllm.test_vllm_cpu import fk_run

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]


def test_passthrough_transcribes_as_stock_and_a_wrong_gemm_fails(tmp_path):
    (tmp_path / "pass").mkdir()
    p, res = fk_run(tmp_path / "pass", "--plugins", "passthrough", "--scenario", "tiny-whisper", "--no-multiprocessing",
                    "--correctness-only", "--allow-uncovered")
    assert res is not None, p.stderr[-3000:]
    (row,) = res["scenarios"]
    assert row["status"] == "PASSED", row.get("failures")
    c = row["correctness"]
    assert c["tokens"]["identical"] == c["tokens"]["requests"] == 4
    assert c["teacher_forced"]["positions"] == 2 * 23 and c["teacher_forced"]["max_abs"] == 0.0
    ev = row["evidence"]["slots"]
    assert ev["gemm"]["status"] == "exercised" and ev["gemm"]["calls"] > 0, ev["gemm"]
    attention = ev["paged_attention"]  # the engine's own kernel runs the in-tree forward, counted
    assert attention["status"] == "exercised" and attention["native_path"] > 0, attention
    (tmp_path / "wrong").mkdir()
    first = tmp_path / "pass"
    p, res = fk_run(tmp_path / "wrong", "--plugins", "wrong-gemm", "--scenario", "tiny-whisper", "--no-multiprocessing",
                    "--correctness-only", "--model-cache", str(first / "models"), "--baseline-from", str(first / "out"))
    assert res is not None, p.stderr[-3000:]
    (row,) = res["scenarios"]
    assert row["baseline"].get("reused_from") and row["status"] == "INCORRECT", row.get("failures")
    assert row["correctness"]["teacher_forced"]["max_abs"] > res["thresholds"]["float32"]["max_abs"]
    assert "reference" not in row  # no float32 reference for a speech model here: the fixed thresholds judge
