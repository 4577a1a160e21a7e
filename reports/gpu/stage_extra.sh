#!/bin/bash
# Wheels an engine needs on the GPU machine that ../shared/device/locks/ leaves out, listed in
# reports/gpu/extra-ENGINE.txt: downloads them here and splits them into parts under .stage/extra-ENGINE/
# (${PART_MIB:-24} MiB each, to travel beside the working tree: a call carries at most 64 MiB with it), and prints one GPU command per part.
# `fk_gpu.sh ENGINE setup` joins the parts in /tmp/fkstage/extra-ENGINE and installs them into the engine's site.
# SKIP="name ..." leaves those packages of the list out (s59-captures: SKIP="spconv-cu126 cumm-cu126 gsplat
# torch-pointcloud ocnn pccm ccimport" bash reports/gpu/stage_extra.sh transformers-science).
set -eu
ENGINE=$1
DEST=.stage/extra-$ENGINE CACHE=${CACHE:-$HOME/.cache/fk-device-wheels}
LIST=$(mktemp); trap 'rm -f "$LIST"' EXIT
grep -v '^#' "reports/gpu/extra-$ENGINE.txt" | grep -v -E "^($(echo "${SKIP:-}" | xargs | tr ' ' '|'))==" > "$LIST" || true
mkdir -p "$CACHE" && rm -rf "$DEST" && mkdir -p "$DEST"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$CACHE" -r "$LIST" 2>&1 | grep -v WARNING || true
while read -r req; do  # $LIST holds no comments
  [ -n "$req" ] || continue
  name=$(echo "${req%%==*}" | tr - _); version=${req##*==}
  whl=$(ls "$CACHE"/"$name"-"$version"-*.whl | head -1)
  split -b "${PART_MIB:-24}m" -d "$whl" "$DEST/$(basename "$whl").part"
done < "$LIST"
for p in "$DEST"/*; do
  echo "send $p  then run: mkdir -p /tmp/fkstage/extra-$ENGINE && cp $p /tmp/fkstage/extra-$ENGINE/"
done
