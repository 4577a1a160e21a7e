"""Group staged wheel parts into device calls: each call carries one folder of at most --mib MiB (with the slim tree,
a call carries at most 64 MiB). Run here, from the repository root:

    python3 reports/gpu/pack_calls.py .stage/extra-transformers* --out .stage/calls-transformers

makes .stage/calls-transformers/NN/<extra folder>/<part> (hard links) and prints, per call, the folder to carry and
the command that puts its parts where `fk_gpu.sh ENGINE setup` joins them (/tmp/fkstage/<extra folder>/).
"""
from __future__ import annotations

import argparse
import os
import shutil


def groups(files: list[tuple[int, str]], limit: int) -> list[list[str]]:
    """First fit, largest first: lists of paths whose sizes sum to at most ``limit`` (a larger file goes alone)."""
    bins: list[tuple[int, list[str]]] = []
    for size, path in sorted(files, reverse=True):
        for i, (used, paths) in enumerate(bins):
            if used + size <= limit:
                bins[i] = (used + size, paths + [path])
                break
        else:
            bins.append((size, [path]))
    return [paths for _, paths in bins]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mib", type=int, default=56)
    args = ap.parse_args()
    files = [(os.path.getsize(os.path.join(d, f)), os.path.join(d, f)) for d in args.dirs for f in os.listdir(d)]
    shutil.rmtree(args.out, ignore_errors=True)
    for n, paths in enumerate(groups(files, args.mib << 20)):
        call = os.path.join(args.out, f"{n:02d}")
        for path in paths:
            dest = os.path.join(call, os.path.basename(os.path.dirname(path)))
            os.makedirs(dest, exist_ok=True)
            os.link(path, os.path.join(dest, os.path.basename(path)))
        mib = sum(os.path.getsize(p) for p in paths) / (1 << 20)
        print(f"carry {call} ({len(paths)} parts, {mib:.1f} MiB): "
              f"mkdir -p /tmp/fkstage && cp -r {call}/* /tmp/fkstage/")


if __name__ == "__main__":
    main()
