#!/usr/bin/env bash
# On the lent GPU machine (after bench/device/prepare.sh here; carry .whl and .gpucarry): issue 38's
# figures in one run of about 7 minutes. Every ingest is `python -m bench.serving.ingest` — the real `memoryos
# worker` (or the same code with the hash embedder: applying alone) as its own process(es), the writes
# queued before the clock, the queue kept full for 30 s, the workers' CPU seconds per turn — with MiniLM,
# the bge-m3-sized and Qwen3-0.6B-sized random-weight stand-ins (speed only), and no model; 1 worker
# process (the shape deployed before) and $PROCS (one per core); the 1-process MiniLM run under py-spy.
# ONLY="minilm_100x20_p16 ..." runs just those. Each run's JSON is a line of $OUT/ingest.jsonl; figures in docs/service.md ("The worker on a GPU").
set -u
source bench/device/setup.sh
STARTED=$(date +%s); BUDGET=${BUDGET:-480}; PROCS=${PROCS:-$(nproc)}; M=/tmp/minilm
left() { echo $(( BUDGET - ($(date +%s) - STARTED) )); }
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }  # ONLY="name ...": just those runs
ingest() {  # name [bench.serving.ingest flags]: one run, skipped when under 60 s of the budget is left
  local name=$1; shift
  wanted "$name" || return 0
  if [ "$(left)" -lt 60 ]; then echo "$name skipped: $(left) s left"; return; fi
  timeout $(( $(left) - 5 )) python3 -m bench.serving.ingest --seconds ${RUN_S:-30} "$@" --out "/tmp/$name.json" \
    > /dev/null 2> "/tmp/$name.log"
  echo "$name rc=$? $(date +%T) $(python3 -c "import json; r=json.load(open('/tmp/$name.json'))['ingest']
r['name']='$name'; print(json.dumps(r), file=open('$OUT/ingest.jsonl', 'a'))
print({k: r.get(k) for k in ('turns', 'turns_per_s', 'worker_cpu_ms_per_turn', 'worker_cores_busy',
 'mean_batch_size', 'share_of_raw_per_batch', 'share_of_raw_best')})" 2>&1 | tail -1)"
  grep -E "Error|error" "/tmp/$name.log" | tail -3
}
standin() {  # architecture run: its random-weight model saved to /tmp/ARCH, marked, if the run is wanted
  wanted "$2" || return 0
  timeout 120 python3 -m bench.gpu.models save "$1" "/tmp/$1" --tokenizer $M --device $DEVICE ${TINY:+--tiny} > /dev/null 2>&1 \
    || echo "build $1 failed"
}
ingest minilm_100x20_p$PROCS --model $M --device $DEVICE --processes $PROCS
standin bge-m3 bge-m3_100x20_p$PROCS
ingest bge-m3_100x20_p$PROCS --model /tmp/bge-m3 --speed-only --device $DEVICE --processes $PROCS
rm -rf /tmp/bge-m3
ingest instant_100x20_p1 --instant-embedder --processes 1
ingest instant_100x20_p$PROCS --instant-embedder --processes $PROCS
ingest minilm_100x20_p1 --model $M --device $DEVICE --processes 1 --profile "$OUT/worker_p1.pyspy"
ingest minilm_1000x3_p$PROCS --model $M --device $DEVICE --processes $PROCS --users 1000 --turns 3 --raw-texts 0
standin qwen3-embedding-0.6b qwen3_100x20_p$PROCS
ingest qwen3_100x20_p$PROCS --model /tmp/qwen3-embedding-0.6b --speed-only --device $DEVICE --processes $PROCS
echo "done $(date +%T), $(left) s of the budget left"
