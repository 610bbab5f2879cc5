#!/usr/bin/env bash
# On the lent GPU machine (after bench/device/prepare.sh here; carry .whl and .gpucarry): issue 50's figures
# in one call of the device tool (BUDGET seconds, under its 10 minutes a command). Every ingest is `python -m
# bench.serving.ingest` — the real `memoryos worker --processes $PROCS` (one per core) with its one embedding
# engine child, or the same code with the hash embedder; the writes queued before the clock, the queue kept
# full for $RUN_S s — and reports the ingest's share of the raw model's best rate, the engine's own rates
# (texts/s and tokens/s inside the model; tokens estimated, and in real tokens through the tokenizer's ratio),
# its batches, and the GPU's busy share (nvidia-smi, 200 ms samples). `python -m bench.gpu.forward` gives each
# model's ceiling on the same GPU: a plain fp16 forward pass over pre-tokenized batches shaped as the
# engine's, in real tokens/s. Models: MiniLM (the bundled one, carried) and the bge-m3-sized random-weight
# stand-in (speed only). The most important first, later ones skipped when the budget runs short:
#   MiniLM and bge-m3-sized, engine on, 100 users × 20 turns; both ceilings; both at 1,000 × 3;
#   MiniLM with the engine off (each process its own model, as before); the hash embedder, 1 process, engine on.
# setup.sh records the GPU, the kernel and an fsync's cost in $OUT/gpu.txt. ONLY="minilm_100x20_p16 ..." runs
# just those. Each ingest's JSON is a line of $OUT/ingest.jsonl, each ceiling's of $OUT/forward.jsonl; what
# they mean: docs/service.md ("The worker on a GPU: issue 50's figures").
# A CPU dry run here: OUT=/tmp/o SKIP_WHEELS=1 DEVICE=cpu RUN_S=5 PROCS=2 TINY=1 BUDGET=400 bash bench/device/run.sh
# (TINY: tiny stand-in shapes, rounds of a tenth of the users, 64 texts for the raw rows and the ceilings).
set -u
source bench/device/setup.sh
STARTED=$(date +%s); BUDGET=${BUDGET:-560}; PROCS=${PROCS:-$(nproc)}; M=/tmp/minilm
SCALE=${TINY:+10}; SCALE=${SCALE:-1}; TEXTS=${TINY:+64}; TEXTS=${TEXTS:-2000}
left() { echo $(( BUDGET - ($(date +%s) - STARTED) )); }
wanted() {  # name...: whether any of these runs is wanted (ONLY="name ...": just those)
  [ -z "${ONLY:-}" ] && return 0
  local name; for name in "$@"; do [[ " $ONLY " == *" $name "* ]] && return 0; done; return 1
}
run_bench() {  # name key jsonl summary command...: run it (--out added), append its JSON's `key` part, named,
  # to $OUT/jsonl, and print `summary` (a Python expression over that part, r)
  local name=$1 key=$2 jsonl=$3 summary=$4; shift 4
  timeout $(( $(left) - 5 )) "$@" --out "/tmp/$name.json" > /dev/null 2> "/tmp/$name.log"
  echo "$name rc=$? $(date +%T) $(python3 -c "import json; r=json.load(open('/tmp/$name.json'))['$key']
r['name']='$name'; print(json.dumps(r), file=open('$OUT/$jsonl', 'a'))
print($summary)" 2>&1 | tail -1)"
  grep -E "Error|error" "/tmp/$name.log" | tail -3
}
ingest() {  # name users turns [bench.serving.ingest flags]: one run, skipped when under 60 s of the budget is left
  local name=$1 users=$(( $2 / SCALE )) turns=$3; shift 3
  wanted "$name" || return 0
  if [ "$(left)" -lt 60 ]; then echo "$name skipped: $(left) s left"; return; fi
  run_bench "$name" ingest ingest.jsonl "{k: r.get(k) for k in ('turns', 'turns_per_s', 'worker_cpu_ms_per_turn',
 'worker_cores_busy', 'mean_batch_size', 'share_of_raw_best', 'engine_mean_batch', 'engine_tokens_per_s',
 'engine_real_tokens_per_s', 'engine_encode_share', 'gpu_busy_percent_mean')}" \
    python3 -m bench.serving.ingest --seconds ${RUN_S:-20} --users $users --turns $turns --raw-texts $TEXTS "$@"
}
forward() {  # name model: the model's forward-pass ceiling on this device
  local name=$1 model=$2
  wanted "$name" || return 0
  if [ "$(left)" -lt 30 ]; then echo "$name skipped: $(left) s left"; return; fi
  run_bench "$name" forward_ceiling forward.jsonl "{'tokens_per_s': r['tokens_per_s'],
 'real_over_estimated_tokens': r['real_over_estimated_tokens'],
 'rows': [(x['batch_size'], x['mean_batch'], x['tokens_per_s'], x['padding_share']) for x in r['rows']]}" \
    python3 -m bench.gpu.forward --model "$model" --device $DEVICE --texts $TEXTS ${TINY:+--repeats 1}
}
standin() {  # ARCH name...: its random-weight model saved to /tmp/ARCH, marked, if any of the runs is wanted
  local arch=$1; shift
  wanted "$@" || return 0
  timeout 120 python3 -m bench.gpu.models save "$arch" "/tmp/$arch" --tokenizer $M --device $DEVICE ${TINY:+--tiny} \
    > /dev/null 2>&1 || echo "build $arch failed"
}
P=$PROCS; B=/tmp/bge-m3
ingest minilm_100x20_p$P 100 20 --model $M --device $DEVICE --processes $P --engine on
standin bge-m3 bge-m3_100x20_p$P forward_bge-m3 bge-m3_1000x3_p$P
ingest bge-m3_100x20_p$P 100 20 --model $B --speed-only --device $DEVICE --processes $P --engine on
forward forward_minilm $M
forward forward_bge-m3 $B
ingest bge-m3_1000x3_p$P 1000 3 --model $B --speed-only --device $DEVICE --processes $P --engine on
rm -rf $B
ingest minilm_1000x3_p$P 1000 3 --model $M --device $DEVICE --processes $P --engine on
ingest minilm_100x20_p${P}_engine_off 100 20 --model $M --device $DEVICE --processes $P --engine off
ingest instant_100x20_p1_engine 100 20 --instant-embedder --processes 1 --engine on
echo "done $(date +%T), $(left) s of the budget left"
