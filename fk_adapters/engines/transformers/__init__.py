"""HF transformers as a host engine: the model is built by ``from_pretrained`` and fk routes slots into its
module instances at load time (``install.py``). Nothing here imports transformers or torch."""
