#!/usr/bin/env bash
# On the lent GPU machine (after bench/device/prepare.sh here): the service's worker on CUDA. bench.service
# ingest with each queued write in its own transaction (--write-run 1, as before runs) and with runs of a
# space's writes in one (--write-run 64, the default), 100 users x 20 turns and 1,000 users x 3, with the
# model and with an instant embedder (applying alone), and the worker as its own process; then the whole bench.service (raw model rows, fp16
# vs fp32 vectors, ack latency, takeover) and bench.faults on the real worker process; with PYSPY=1 last,
# the 100 x 20 ingest under py-spy (its raw samples in $OUT/ingest.pyspy: where the worker's time goes).
# Figures in the README, "The service's worker on a GPU". About 6 minutes (+80 s with PYSPY=1); each step
# has its own time limit. Only 8 files come back from $OUT: the ingest runs print their figures.
set -u
source bench/device/setup.sh

echo "== ingest A/B $(date +%T)"
for run in 1 64; do ingest "ingest_100x20_run$run" ${USERS:-100} ${TURNS:-20} --write-run $run; done
ingest "ingest_100x20_process" ${USERS:-100} ${TURNS:-20} --worker-process  # no GIL shared with the clients
echo "== service, whole $(date +%T)"
timeout ${SERVICE_LIMIT:-150} python3 -m bench.service --device "$DEVICE" --model /tmp/minilm \
  --users ${USERS:-100} --turns ${TURNS:-20} --raw-texts ${RAW:-2000} --out "$OUT/service.json" 2> "$OUT/service.log"
echo "service rc=$? $(date +%T)"; grep -E "embedding: loaded|Error|error" "$OUT/service.log" | head -5
for run in 1 64; do ingest "ingest_1000x3_run$run" ${USERS2:-1000} ${TURNS2:-3} --write-run $run; done
for run in 1 64; do ingest "instant_100x20_run$run" ${USERS:-100} ${TURNS:-20} --write-run $run --instant-embedder; done
echo "== faults $(date +%T)"
MEMORYOS_EMBEDDING_DEVICE=$DEVICE MEMORYOS_EMBEDDING_MODEL_NAME=/tmp/minilm timeout ${FAULTS_LIMIT:-120} \
  python3 -m bench.faults --target worker --rounds ${ROUNDS:-3} --redis-restarts 1 --writes-per-round ${WPR:-300} \
  > "$OUT/faults.json" 2> "$OUT/faults.log"
echo "faults rc=$? $(date +%T)"; cat "$OUT/faults.json"; tail -3 "$OUT/faults.log"
[ -n "${PYSPY:-}" ] || exit 0
echo "== py-spy $(date +%T)"
timeout ${SPY_LIMIT:-90} py-spy record -r 200 --threads -f raw -o "$OUT/ingest.pyspy" -- python3 -m bench.service \
  --device "$DEVICE" --model /tmp/minilm --only-ingest --users ${USERS:-100} --turns ${TURNS:-20} \
  --out /tmp/spy.json > /tmp/spy.out 2> /tmp/spy.log
echo "py-spy rc=$? $(date +%T) $(python3 -c "import json; print(json.load(open('/tmp/spy.json'))['ingest'])" 2>&1)"
