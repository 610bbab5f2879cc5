#!/usr/bin/env bash
# On the lent GPU machine (after bench/device/prepare.sh here): the service's worker on CUDA — bench.service
# (100 users x 20 turns, raw model rows, fp16 vs fp32 vectors), bench.faults on the real worker process, and
# bench.service with 1,000 users. Figures in the README, "The service's worker on a GPU". About 4 minutes.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -n "${SKIP_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TQDM_DISABLE=1
mkdir -p /tmp/r /tmp/bin && tar xJf .gpucarry/redis.tar.xz -C /tmp/r || exit 1
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/r/redis/lib exec /tmp/r/redis/redis-server "$@"\n' > /tmp/bin/redis-server
chmod +x /tmp/bin/redis-server; export PATH=/tmp/bin:$PATH
redis-server --version || exit 1
python3 -m bench.gpu_carry unpack .gpucarry/minilm-int8 /tmp/minilm || exit 1
export MEMORYOS_LOCOMO=$PWD/.gpucarry/locomo_dev.json
DEVICE=${DEVICE:-cuda}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt"
python3 -c "import torch, sentence_transformers as s; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'st', s.__version__)" | tee -a "$OUT/gpu.txt"
echo "== service $(date +%T)"
timeout ${SERVICE_LIMIT:-300} python3 -m bench.service --device "$DEVICE" --model /tmp/minilm \
  --users ${USERS:-100} --turns ${TURNS:-20} --raw-texts ${RAW:-2000} --out "$OUT/service.json" 2> "$OUT/service.log"
echo "service rc=$? $(date +%T)"; grep -E "embedding: loaded|Error|error" "$OUT/service.log" | head -5
echo "== faults $(date +%T)"
MEMORYOS_EMBEDDING_DEVICE=$DEVICE MEMORYOS_EMBEDDING_MODEL_NAME=/tmp/minilm timeout ${FAULTS_LIMIT:-150} \
  python3 -m bench.faults --target worker --rounds ${ROUNDS:-5} --redis-restarts 1 --writes-per-round ${WPR:-300} \
  > "$OUT/faults.json" 2> "$OUT/faults.log"
echo "faults rc=$? $(date +%T)"; cat "$OUT/faults.json"; tail -3 "$OUT/faults.log"
echo "== service, 1000 users $(date +%T)"
timeout ${SERVICE2_LIMIT:-100} python3 -m bench.service --device "$DEVICE" --model /tmp/minilm \
  --users ${USERS2:-1000} --turns ${TURNS2:-3} --raw-texts 0 --rates 500 --out "$OUT/service_1000.json" 2> "$OUT/service_1000.log"
echo "service_1000 rc=$? $(date +%T)"; python3 -c "import json; print(json.load(open('$OUT/service_1000.json'))['ingest'])"
