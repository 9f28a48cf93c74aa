#!/usr/bin/env bash
# The per-layer truth fixtures of issue 32 (part 3), in one call on the device machine (1 or N GPUs of one host):
#   1. builds the standalone Marlin W4A16 extension (github:IST-DASLab/marlin, exported into $MARLIN_SRC, default
#      .marlin: not part of k25trace, never committed; carried to the device) with nvcc for this GPU, and checks it
#      against a dequantized matmul (inside decode_loop); if it does not build, the runs below use bf16 GEMMs;
#   2. one Kimi-shaped decode program (python3 -m k25trace.synth.decode_loop), 16 layers: layer 0 dense (an
#      18432-wide SwiGLU MLP, Kimi's first_k_dense_replace = 1), layers 1-15 MoE (top-8 of 384 experts, shared
#      expert), layer 5 odd (top-16: twice the routed experts' work), batch 1/8/64, twice:
#        eager  (--eager --record-shapes --layer-annotations: record_function pre / model.layers.{i} / post: the truth)
#        graph  (ONE CUDA graph per step: embedding .. final norm; lm_head and argmax eager, as vLLM)
# Run from the repository root:  bash benchmarks/device_layers.sh OUTDIR [WORLD_SIZE]   (WORLD_SIZE default 1)
# What comes back (at most 8 files): provenance.txt, log.txt, decode_loop_layers_{eager,graph}.json,
# eager/<rank files>.pt.trace.json.gz, graph/<rank files>.pt.trace.json.gz.
# NVLink multicast stays off (the device machine's rule).
set -uo pipefail
OUT=${1:?output directory}
WS=${2:-1}
MARLIN_SRC=${MARLIN_SRC:-.marlin}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT/eager" "$OUT/graph"
T=$(mktemp -d)
LOG=$OUT/log.txt
{
  echo "# provenance $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv
  [ "$WS" -gt 1 ] && nvidia-smi topo -m
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "cap", torch.cuda.get_device_capability())'
  nvcc --version | tail -2
  echo "ninja $(ninja --version 2>&1)"
  echo "marlin source: github:IST-DASLab/marlin $(cat "$MARLIN_SRC/COMMIT" 2>/dev/null || echo '(no COMMIT file)')"
  env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' | sort
} > "$OUT/provenance.txt" 2>&1
cat "$OUT/provenance.txt"
run() { echo "+ $(date -u +%T) $*" >&2; "$@"; }  # the caller sends stderr to the log
M=()
if [ -f "$MARLIN_SRC/marlin/marlin_cuda_kernel.cu" ]; then
  t0=$(date +%s)
  # build, then check against a dequantized matmul (_Marlin); a failure of either falls back to bf16
  if run timeout 420 python3 -c 'import sys; from k25trace.synth.decode_loop import load_marlin, _Marlin
load_marlin(sys.argv[1], sys.argv[2], verbose=True); print("marlin check: mean relative error", _Marlin(sys.argv[1], sys.argv[2], "cuda").check_rel_err)' \
      "$MARLIN_SRC" "$T/marlin-build" >> "$LOG" 2>&1; then
    echo "marlin built and checked in $(( $(date +%s) - t0 )) s ($(grep '^marlin check' "$LOG"))" | tee -a "$OUT/provenance.txt"
    M=(--marlin --marlin-src "$MARLIN_SRC" --marlin-build "$T/marlin-build" --dtype float16)
  else
    echo "marlin did NOT build or pass its check ($(( $(date +%s) - t0 )) s): bf16 GEMMs instead" | tee -a "$LOG" "$OUT/provenance.txt"
  fi
else
  echo "no Marlin source in $MARLIN_SRC: bf16 GEMMs" | tee -a "$LOG" "$OUT/provenance.txt"
fi
COMMON=(--world-size "$WS" --layers 16 --dense-layers 1 --odd-layer 5 --odd-factor 2 --batch-sizes 1,8,64 --warmup 3
        "${M[@]}")
eager() {
  run timeout 200 python3 -m k25trace.synth.decode_loop --out "$T/eager" --steps 4 --eager --record-shapes \
      --layer-annotations --master-port 29551 "${COMMON[@]}" > "$OUT/decode_loop_layers_eager.json" 2> >(tee -a "$LOG" >&2)
}
if ! eager && [ ${#M[@]} -gt 0 ]; then  # Marlin built but the program failed with it: both runs without it
  echo "the eager run with Marlin failed: both runs with bf16 GEMMs instead" | tee -a "$LOG" "$OUT/provenance.txt"
  rm -rf "$T/eager"; M=(); COMMON=("${COMMON[@]:0:14}"); eager
fi
run timeout 200 python3 -m k25trace.synth.decode_loop --out "$T/graph" --steps 6 \
    --master-port 29552 "${COMMON[@]}" > "$OUT/decode_loop_layers_graph.json" 2> >(tee -a "$LOG" >&2)
sleep 1
cp "$T"/eager/*.pt.trace.json.gz "$OUT/eager/"; cp "$T"/graph/*.pt.trace.json.gz "$OUT/graph/"
ls -l "$OUT" "$OUT/eager" "$OUT/graph"; date -u +%T
