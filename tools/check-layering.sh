#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check-layering.sh: core/'s folders are layers (KVFS_CORE_LAYERS in
# core/CMakeLists.txt, lowest first). Every #include "core/X/..." in a file
# of core/Y/ must name a folder X at or below Y; control/ may include only
# util/status.h; every source of core/ sits in one of the folders; and
# BlockStore, the owner, stays within the budget its header states. Prints
# each breach and exits 1 if there is one.
#
#   tools/check-layering.sh [SOURCE_DIR]
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
layers=$(sed -n '/^set(KVFS_CORE_LAYERS/,/CACHE INTERNAL/p' "$src/core/CMakeLists.txt" |
  sed 's/set(KVFS_CORE_LAYERS//; s/CACHE INTERNAL.*//' | tr -s ' \n' ' ')
declare -A rank
i=0
for l in $layers; do
  rank[$l]=$i
  i=$((i + 1))
done
((i > 0)) || { echo "check-layering: no KVFS_CORE_LAYERS in core/CMakeLists.txt" >&2; exit 2; }
bad=0
for f in "$src"/core/*.h "$src"/core/*.cc; do
  [[ -e $f ]] || continue
  echo "core/${f##*/}: not in a folder of core/"
  bad=1
done
for dir in "$src"/core/*/; do
  me=$(basename "$dir")
  if [[ -z ${rank[$me]+x} ]]; then
    echo "core/$me/: a folder not in KVFS_CORE_LAYERS"
    bad=1
    continue
  fi
  for f in "$dir"*.h "$dir"*.cc; do
    [[ -e $f ]] || continue
    while IFS=: read -r line inc; do
      to=${inc#core/}
      to=${to%%/*}
      rel=core/$me/${f##*/}:$line
      if [[ $me == control ]]; then
        [[ $inc == core/util/status.h || $to == control ]] ||
          { echo "$rel: includes $inc (control/ may include only util/status.h)"; bad=1; }
      elif [[ -z ${rank[$to]+x} ]]; then
        echo "$rel: includes $inc, not in a layer"
        bad=1
      elif ((rank[$to] > rank[$me])) || [[ $to == control ]]; then
        echo "$rel: includes $inc ($to/ is above $me/)"
        bad=1
      fi
    done < <(grep -n -o '#include "core/[^"]*"' "$f" | sed 's/#include "\(.*\)"/\1/')
  done
done
# BlockStore's budget, as its header states it ("Budget: N lines and M methods").
budget=$(grep -o 'Budget: [0-9]* lines and [0-9]* methods' "$src/core/store/block_store.h" || true)
if [[ -z $budget ]]; then
  echo "core/store/block_store.h: no \"Budget: N lines and M methods\" line"
  bad=1
else
  max_lines=$(awk '{print $2}' <<<"$budget")
  max_methods=$(awk '{print $5}' <<<"$budget")
  lines=$(cat "$src"/core/store/block_store*.h "$src"/core/store/block_store*.cc | wc -l)
  methods=$(grep -hoE 'BlockStore::[A-Za-z_]+\(' "$src"/core/store/block_store*.cc | sort -u | wc -l)
  if ((lines > max_lines || methods > max_methods)); then
    echo "BlockStore: $lines lines and $methods methods, over its budget of $max_lines and $max_methods"
    bad=1
  else
    echo "check-layering: BlockStore $lines lines, $methods methods (budget $max_lines, $max_methods)"
  fi
fi
if ((bad)); then
  echo "check-layering: includes against the layering (core/CMakeLists.txt: KVFS_CORE_LAYERS) or BlockStore over its budget" >&2
  exit 1
fi
echo "check-layering: core/ follows its layers ($layers)"
