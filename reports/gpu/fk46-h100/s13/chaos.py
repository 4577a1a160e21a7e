"""bf16 vs float32 of fk's seeded Mamba/Mamba2 (HF transformers, CPU): does initializer_range make it chaotic?"""
# Run in session 13 on the CPU machine: .venv/bin/python chaos.py SCENARIO INITIALIZER_RANGE LAYERS (seed 8, 4 prompts x 64 tokens)
import sys, time, torch, tomllib
sys.path.insert(0, "/work/main")
from fk_adapters.weights import _hf_config
from fk_adapters.engines.transformers.colbert import model_class
name, ir, layers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
cfg = tomllib.load(open(f"/work/main/scenarios/{name}.toml", "rb"))["model"]
cfg = dict(cfg, initializer_range=ir, num_hidden_layers=layers)
torch.manual_seed(8)
t0 = time.time()
model = model_class(cfg["architectures"][0])._from_config(_hf_config(cfg), dtype=torch.float32)
gen = torch.Generator().manual_seed(8)
with torch.no_grad():
    for n, p in model.named_parameters():
        flat = p.reshape(-1)
        if p.ndim == 1 and p.numel() > 1 and bool((flat == flat[0]).all()):
            p.add_((ir if n.endswith("bias") else 0.1) * torch.randn(p.shape, generator=gen))
model.eval()
ids = torch.randint(0, cfg["vocab_size"], (4, 64), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    lp32 = torch.log_softmax(model(ids).logits.float(), -1)
    model.to(torch.bfloat16)
    lp16 = torch.log_softmax(model(ids).logits.float(), -1)
tgt = ids[:, 1:]
g32 = lp32[:, :-1].gather(-1, tgt[..., None])[..., 0]; g16 = lp16[:, :-1].gather(-1, tgt[..., None])[..., 0]
d = (g32 - g16).abs()
top = (lp32.argmax(-1) == lp16.argmax(-1)).float().mean().item()
print(f"{name} ir={ir} layers={layers}: teacher |dlogprob| mean {d.mean():.3f} max {d.max():.2f}; "
      f"top-1 agree {top:.2f}; fp32 teacher logprob mean {g32.mean():.2f}; logit std {lp32.std(-1).mean():.2f} [{time.time()-t0:.0f}s]", flush=True)
