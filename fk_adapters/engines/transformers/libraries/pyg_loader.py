"""PyTorch Geometric models in the transformers host: ``[model] library = "torch_geometric"``, ``class`` (a class of
``torch_geometric.nn.models``) and that class's constructor arguments; for a recommender (LightGCN) the interaction
graph's sizes: ``num_users``, ``num_items``, ``num_edges``.

The checkpoint is the class's seeded ``state_dict`` (``model.safetensors``) with ``config.json`` (class and
arguments); it is loaded back into a model the class builds, as a PyG user does. No rating data can be downloaded:
the bipartite user-item graph is drawn from the scenario's seed with the dataset's sizes (every user with at least
one item), the same graph in every run. One item is one user's scores over all items (a full ranking).
"""
from __future__ import annotations

from fk_adapters.engines.transformers.libraries import LibraryError, state_dict

FK_KEYS = ("library", "class", "num_users", "num_items", "num_edges", "seed")  # fk's, not the class's


def version() -> str:
    import torch_geometric

    return torch_geometric.__version__


def pyg_class(name: str):
    from torch_geometric.nn import models

    cls = getattr(models, name, None)
    if not isinstance(cls, type):
        raise LibraryError(f"torch_geometric {version()} has no model class {name!r}")
    return cls


def _build(config: dict):
    args = {k: v for k, v in config.items() if k not in FK_KEYS}
    if config["class"] == "LightGCN":
        args["num_nodes"] = config["num_users"] + config["num_items"]
    return pyg_class(config["class"])(**args)


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """The class's own seeded init (LightGCN: Xavier-uniform embeddings), constants spread, saved with its config."""
    state_dict.seeded_save(lambda: _build(config), out_dir, seed, dtype, dict(config, seed=seed))


def interaction_graph(users: int, items: int, edges: int, seed: int):
    """edge_index [2, 2 * edges] of a seeded bipartite graph (users 0..U-1, items U..U+I-1, both directions):
    each user rates one item, the rest of the ratings fall on random distinct (user, item) pairs."""
    import torch

    if edges < users or edges > users * items:
        raise LibraryError(f"num_edges {edges} must lie in [num_users, num_users * num_items]")
    gen = torch.Generator().manual_seed(seed)
    first = torch.randint(0, items, (users,), generator=gen) + torch.arange(users) * items  # pair index u * I + i
    free = torch.ones(users * items, dtype=torch.bool)
    free[first] = False
    rest = torch.randperm(users * items, generator=gen)
    pairs = torch.cat([first, rest[free[rest]][: edges - users]])
    u, i = pairs // items, pairs % items + users
    return torch.stack([torch.cat([u, i]), torch.cat([i, u])])


def load(job: dict, device: str):
    import torch

    config = state_dict.config(job["model_dir"])
    if config["class"] != "LightGCN":
        raise LibraryError(f"fk serves torch_geometric's LightGCN only, not {config['class']}")
    model = state_dict.load_into(_build(config), job["model_dir"])
    model = model.to(device=device, dtype=getattr(torch, job["dtype"])).eval()
    edge_index = interaction_graph(config["num_users"], config["num_items"], config["num_edges"], config["seed"])
    return _ranking(model, edge_index.to(device), config)


def _ranking(model, edge_index, config: dict):
    """LightGCN as a recommender serves it: one propagation over the whole graph, then the batch's users scored
    against every item (a module, the PyG model its submodule: the host routes slots into it)."""
    import types

    import torch

    class LightGCNRanking(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.num_users = model, config["num_users"]
            self.config = types.SimpleNamespace(**config)  # what the host reads of a model's config
            self.register_buffer("edge_index", edge_index, persistent=False)

        def forward(self, users_batch):
            emb = self.model.get_embedding(self.edge_index)
            return emb[users_batch] @ emb[self.num_users:].T

    return LightGCNRanking()


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """``b`` users drawn from the seed (the same users on every device)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return {"users_batch": torch.randint(0, model.num_users, (b,), generator=gen).to(device)}
