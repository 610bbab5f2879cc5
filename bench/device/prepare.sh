#!/usr/bin/env bash
# Here (a machine with PyPI and the project installed): fill .whl/ and .gpucarry/ with what a lent GPU
# machine lacks for bench/device/run.sh — it reaches no registry and has CUDA PyTorch and
# sentence-transformers but no faiss, pydantic or redis (both folders are in .gitignore). 55 MB with the
# tree (the device tool carries 64 MiB).
#   bash bench/device/prepare.sh        then, with the device tool: bash bench/device/run.sh, carry .whl .gpucarry
set -euo pipefail
cd "$(dirname "$0")/../.."
version() { python3 -m pip show "$1" | awk '/^Version/{print $2}'; }
rm -rf .whl .gpucarry && mkdir -p .whl .gpucarry/redis/lib
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl \
    "pydantic==$(version pydantic)" "pydantic-core==$(version pydantic_core)" \
    "pydantic-settings==$(version pydantic-settings)" "python-dotenv==$(version python-dotenv)" \
    "typing-inspection==$(version typing-inspection)" "annotated-types==$(version annotated-types)" \
    "typing_extensions==$(version typing_extensions)" "faiss-cpu==$(version faiss-cpu)" "redis==$(version redis)" \
    py-spy==0.4.3  # bench.serving.ingest --profile
# redis-server with the libraries it links beyond glibc, run there through a wrapper (run.sh).
cp "$(command -v redis-server)" .gpucarry/redis/
ldd "$(command -v redis-server)" | awk '/=> \//{print $3}' | grep -vE '/lib(c|m|stdc\+\+|gcc_s)\.so' |
    xargs -I{} cp -L {} .gpucarry/redis/lib/
tar -C .gpucarry -cJf .gpucarry/redis.tar.xz redis && rm -rf .gpucarry/redis
python3 -m bench.gpu.carry pack .gpucarry/minilm-int8
cp "$(python3 -c 'from bench.corpus import locomo_raw; print(locomo_raw())')" .gpucarry/locomo_dev.json
du -sh .whl .gpucarry
