#!/usr/bin/env bash
# The real multi-GPU campaign of issue 10, in one call on the device machine (N GPUs of one host):
#   1. the all-reduce floor at the message sizes of a TP-N Kimi-shaped decode step (batch 1/8/64, 123 per step)
#      and a sweep 16 KB .. 64 MB (bench allreduce --save-json; imported here with `k25trace bench import`);
#   2. the decode loop (python3 -m k25trace.synth.decode_loop) with CUDA graphs (61 layers) and eagerly (8 layers,
#      shapes recorded), batch 1/8/64, a CPU-delayed rank (launch skew) on some steps and a GPU-delayed rank (spin
#      kernel before one call site) on others.
# Run from the repository root:  bash benchmarks/device_tp2.sh OUTDIR [WORLD_SIZE]   (ONLY=bench: the bench part alone)
# NVLink multicast stays off (the device machine's rule; NCCL's NVLS is not needed for these sizes).
set -uo pipefail
OUT=${1:?output directory}
WS=${2:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
T=$(mktemp -d)
{
  echo "# provenance $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
  env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' | sort
} > "$OUT/provenance.txt" 2>&1
cat "$OUT/provenance.txt"
run() { echo "+ $(date -u +%T) $*" >&2; "$@"; }
COMMON=(--world-size "$WS" --batch-sizes 1,8,64 --warmup 3
        --delay-rank $((WS - 1)) --delay-ms 0.3 --delay-every 3
        --gpu-delay-rank 0 --gpu-delay-us 300 --gpu-delay-site 9 --gpu-delay-every 3 --gpu-delay-offset 1)
[ "${ONLY:-}" = bench ] || run timeout 170 python3 -m k25trace.synth.decode_loop --out "$T/graph" --steps 6 --master-port 29541 "${COMMON[@]}" --layers 61 \
    > "$OUT/decode_loop_graph.json"
[ -d "$T/graph" ] && tar -C "$T" -cf "$T/graph.tar" graph && split -b 15M -d "$T/graph.tar" "$OUT/graph.tar.part"; ls -l "$T/graph"
run timeout 120 python3 -m k25trace.bench_cli allreduce --backend nccl --world-size "$WS" --batch-sizes 1,8,64 \
    --count 123 --iters 300 --warmup 30 --bursts 30 --run-name "kimi-tp$WS-h200" --save-json "$OUT/ar_kimi.json"
[ "${ONLY:-}" = bench ] || run timeout 170 python3 -m k25trace.synth.decode_loop --out "$T/eager" --steps 3 --eager --record-shapes \
    --master-port 29542 "${COMMON[@]}" --layers 8 > "$OUT/decode_loop_eager.json"
[ -d "$T/eager" ] && tar -C "$T" -cf "$T/eager.tar" eager && split -b 15M -d "$T/eager.tar" "$OUT/eager.tar.part"; ls -l "$T/eager"
run timeout 120 python3 -m k25trace.bench_cli allreduce --backend nccl --world-size "$WS" \
    --sizes 16K,32K,64K,128K,256K,512K,1M,2M,4M,8M,16M,32M,64M --count 32 --iters 200 --bursts 20 \
    --run-name "sweep-tp$WS-h200" --save-json "$OUT/ar_sweep.json"
ls -l "$OUT"; date -u +%T
