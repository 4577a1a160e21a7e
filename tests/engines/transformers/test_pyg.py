"""PyTorch Geometric in the transformers host: the seeded interaction graph, LightGCN's checkpoint and its ranking
call, without an engine run."""
import importlib.util

import pytest
import torch

from fk_adapters.engines.transformers.libraries import LibraryError, pyg_loader

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                                reason="torch_geometric is not installed")
CONFIG = {"library": "torch_geometric", "class": "LightGCN", "num_users": 30, "num_items": 20, "num_edges": 200,
          "embedding_dim": 8, "num_layers": 2}


def test_the_graph_has_the_datasets_sizes_every_user_rates_and_no_pair_twice():
    g = pyg_loader.interaction_graph(30, 20, 200, seed=4)
    assert g.shape == (2, 400) and torch.equal(g, pyg_loader.interaction_graph(30, 20, 200, seed=4))
    u, i = g[:, :200]
    assert bool((u < 30).all()) and bool((i >= 30).all()) and bool((i < 50).all())
    assert len(set(zip(u.tolist(), i.tolist()))) == 200 and set(u.tolist()) == set(range(30))
    assert torch.equal(g[:, 200:], g[:, :200].flip(0))  # both directions
    assert not torch.equal(g, pyg_loader.interaction_graph(30, 20, 200, seed=5))
    with pytest.raises(LibraryError, match="num_edges"):
        pyg_loader.interaction_graph(30, 20, 10, seed=4)


def test_the_checkpoint_loads_back_as_a_ranking_of_every_item(tmp_path):
    pyg_loader.build_and_save(CONFIG, str(tmp_path), seed=7, dtype="float32", device="cpu")
    model = pyg_loader.load({"model_dir": str(tmp_path), "dtype": "float32"}, "cpu")
    x = pyg_loader.batch(model, {}, 4, seed=1, device="cpu", dtype=torch.float32)
    scores = model(**x)
    assert scores.shape == (4, 20) and torch.isfinite(scores).all()
    emb = model.model.get_embedding(model.edge_index)  # PyG's own propagation, scored by hand
    torch.testing.assert_close(scores, emb[x["users_batch"]] @ emb[30:].T)
    again = pyg_loader.load({"model_dir": str(tmp_path), "dtype": "float32"}, "cpu")
    assert torch.equal(again(**x), scores)
    with pytest.raises(LibraryError, match="no model class"):
        pyg_loader.pyg_class("NoSuchModel")
