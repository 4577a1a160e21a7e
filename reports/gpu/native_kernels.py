"""Collect stock-engine kernel names from committed GPU profiles -> fk_adapters/native_kernels.json (run from the repo root)."""
import json, glob, os, collections
out = collections.defaultdict(lambda: collections.defaultdict(set))
srcs = collections.defaultdict(set)
for p in glob.glob('reports/gpu/**/result.json', recursive=True):
    try: r = json.load(open(p))
    except Exception: continue
    prof = r.get('profile')
    if not prof or not isinstance(prof, list): continue
    d = os.path.dirname(p)
    # stock only: no plugin loads recorded except fk's capture recorder (engine's own kernels)
    loads = glob.glob(os.path.join(d, 'loads', '*.json'))
    plugins = set()
    for l in loads:
        for pl in json.load(open(l)).get('plugins', []):
            plugins.add(pl['name'])
    if plugins - {'fk-capture'}: continue
    eng = r.get('engine') or ('vllm' if 'vllm' in p else 'sglang' if 'sglang' in p else 'transformers' if 'transformers' in p else None)
    ver = r.get('engine_version')
    if not eng or not ver: 
        continue
    for pp in prof:
        out[eng][ver] |= set(pp.get('kernels', {}))
    srcs[(eng, ver)].add(os.path.dirname(d))
for (e,v),s in srcs.items(): print(e, v, len(out[e][v]), len(s))
data = {"about": "Kernel names the stock engines launched in profiled GPU runs committed under reports/gpu "
        "(baselines and fk capture --profile runs, whose recorder calls the engine's own kernels); a plugin cannot "
        "claim these names as its own (fk_adapters/kernel_names.py). Made by reports/gpu/native_kernels.py.",
        "engines": {e: {v: sorted(n) for v, n in vs.items()} for e, vs in out.items()}}
json.dump(data, open('fk_adapters/native_kernels.json', 'w'), indent=0)
