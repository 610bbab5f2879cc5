# Sourced by the scripts beside it, on the lent GPU machine: installs the carried wheels, unpacks
# redis-server and the packed MiniLM (/tmp/minilm), and records the device in $OUT/gpu.txt.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -n "${SKIP_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TQDM_DISABLE=1 PATH=/tmp/bin:/tmp/site/bin:$PATH
mkdir -p /tmp/r /tmp/bin && tar xJf .gpucarry/redis.tar.xz -C /tmp/r || exit 1
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/r/redis/lib exec /tmp/r/redis/redis-server "$@"\n' > /tmp/bin/redis-server
chmod +x /tmp/bin/redis-server
redis-server --version || exit 1
python3 -m bench.gpu.carry unpack .gpucarry/minilm-int8 /tmp/minilm || exit 1
export MEMORYOS_LOCOMO=$PWD/.gpucarry/locomo_dev.json
DEVICE=${DEVICE:-cuda}
# The kernel (gVisor reports 4.4.0) and an fsync's cost: the worker commits with synchronous=FULL and
# Redis fsyncs every write, so a host whose syscalls cost more moves every ingest figure.
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; echo "kernel $(uname -r)"
  python3 -c "import os, time; f = os.open('/tmp/fsync.probe', os.O_WRONLY | os.O_CREAT); t = time.perf_counter()
for _ in range(200): os.write(f, b'x'); os.fsync(f)
print(f'fsync {(time.perf_counter() - t) / 200 * 1e6:.0f} us')"; } 2>&1 | tee "$OUT/gpu.txt"
python3 -c "import torch, sentence_transformers as s; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'st', s.__version__)" | tee -a "$OUT/gpu.txt"

