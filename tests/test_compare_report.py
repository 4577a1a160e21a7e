"""fk compare's outputs: the pull-request comment and the CSV (``compare_report``)."""
import csv
import io

import pytest

from fk_adapters import compare, compare_report
from tests.test_compare import results, row


def test_markdown_starts_with_the_verdict_and_shows_every_interval():
    cmp = compare.compare(results(row(tput=1.10)), results(row(tput=1.03)), threshold=0.02)
    md = compare_report.to_markdown(cmp)
    assert md.splitlines()[0] == cmp["verdict_line"] and md.startswith("**FAIL**: 1 regression")
    assert md.count("<details><summary>") == 4 and md.count("</details>") == 4
    tp = next(p for p in cmp["perf"] if p["kind"] == "throughput")
    assert f"{tp['delta']['ratio']:.3f} [{tp['delta']['lo']:.3f}, {tp['delta']['hi']:.3f}]" in md
    assert f"{tp['base']['ratio']:.3f} [{tp['base']['lo']:.3f}, {tp['base']['hi']:.3f}]" in md
    assert "**slower**" in md
    summary_table = md.split("<details>")[0]
    assert "| s1 " in summary_table and "throughput balanced: " in summary_table


def test_csv_has_one_row_per_scenario_workload_metric():
    cmp = compare.compare(results(row("s1", tput=1.10), row("s2")), results(row("s1", tput=1.03), row("s2")))
    rows = list(csv.DictReader(io.StringIO(compare_report.to_csv(cmp))))
    assert [(r["scenario"], r["kind"], r["workload"]) for r in rows] == [
        ("s1", "correctness", ""), ("s2", "correctness", ""), ("s1", "throughput", "balanced"),
        ("s1", "latency", "batch1"), ("s2", "throughput", "balanced"), ("s2", "latency", "batch1")]
    s1 = rows[2]
    assert s1["metric"] == "tokens_per_s" and s1["verdict"] == "slower"
    assert float(s1["delta"]) == pytest.approx(cmp["perf"][0]["delta"]["ratio"])
    assert float(s1["delta_lo"]) <= float(s1["delta"])
    assert rows[0]["base"] == rows[0]["head"] == "PASSED" and rows[0]["verdict"] == "ok"
