#!/bin/bash
# The tree a device call carries, slimmed for staging: a call carries at most 64 MiB, the working tree included
# (42 MiB at session 31, nearly all of it reports/gpu's result folders). Run here, from the repository root:
#   bash reports/gpu/slim_tree.sh on     # result folders out of the index and ignored: the tree is the code (~4 MiB),
#                                        # so engine parts can be 56 MiB (`stage.py ENGINE`, its default)
#   bash reports/gpu/slim_tree.sh off    # index and .git/info/exclude as they were (a pre-commit hook refuses
#                                        # commits until then)
# $KEEP: result files the lanes read on the machine (a capture's workload), kept in the tree.
# Start the lanes from a copy of the tree on the machine (tar . into /tmp/fk-repo), so later calls' trees don't matter.
set -eu
cd "$(git rev-parse --show-toplevel)"
KEEP=${KEEP:-reports/gpu/s28-h100x4/i30/vllm/fk46/fk46-qwen3-next/vllm.json}
MARK="# fk slim_tree.sh"
HOOK="$(git rev-parse --git-path hooks)/pre-commit"
case ${1:-} in
  on)
    if grep -q "$MARK" .git/info/exclude 2>/dev/null; then echo "already on"; exit 0; fi
    echo "$MARK" >> .git/info/exclude
    git ls-files reports/gpu | awk -F/ 'NF>3{print $1"/"$2"/"$3}' | sort -u | while read -r d; do
      git rm -r -q --cached "$d"; echo "/$d/" >> .git/info/exclude
    done
    [ -z "$KEEP" ] || git reset -q HEAD -- $KEEP
    mkdir -p "$(dirname "$HOOK")"
    if [ ! -e "$HOOK" ]; then  # a commit now would delete the result folders (session 66 made two)
      printf '#!/bin/sh\n%s\necho "slim_tree.sh is on: reports/gpu is out of the index; run slim_tree.sh off first" >&2\nexit 1\n' \
        "$MARK" > "$HOOK" && chmod +x "$HOOK"
    else echo "warning: $HOOK exists: nothing stops a commit while the tree is slim"; fi
    echo "the tree now carries $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes" ;;
  off)
    git reset -q HEAD -- reports/gpu
    awk -v m="$MARK" '$0==m{on=1; next} on && /^\/reports\/gpu\//{next} {print}' .git/info/exclude > .git/info/exclude.new
    mv .git/info/exclude.new .git/info/exclude
    if grep -q "$MARK" "$HOOK" 2>/dev/null; then rm -f "$HOOK"; fi
    git status --short | head -5 ;;
  *) echo "usage: slim_tree.sh on|off"; exit 2 ;;
esac
