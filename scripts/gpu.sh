#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The GPU suite, on a machine with one or more NVIDIA GPUs: builds (unless a
# build is given), then runs tests/gpu/test_gpu (retention, graphs, peers,
# scrubbing, a client killed during a recall, a restart), the seed replay on
# the cuda backend (on one GPU, both stages on GPU 0: seed-pp32-16-1gpu.json),
# the engine API contract test and the Python package's tests (torch
# tensors, the allocator shim under a MemPool, CUDA graphs) and the MoE
# engine example (token for token against plain CUDA memory) on the cuda
# backend, the transformers integration where torch, a GPU and transformers
# 5 are there and NO_TF is unset (tests/python/gpu_transformers_cache.py,
# examples/transformers_moe.py --small --check and its seed-shaped run,
# tests/gpu/gpu_transformers_bench.py's decode throughput and
# gpu_transformers_graph.py's CUDA graph: one log each, transformers_*.log;
# else one line saying why they were skipped),
# and the benchmarks (vram-bench; vram-bench-driver, what the driver lets a
# broker overlap). Logs and results go to $OUT (default ./gpu-out).
#
#   sh scripts/gpu.sh                 # build in build-gpu, then run
#   VRAM_GPU_BUILD=DIR sh scripts/gpu.sh   # use a build made elsewhere
#
# A machine without libuv and cJSON development packages can run a build
# made on Debian 12 with `sh scripts/gpu.sh --prepare` there: it builds
# build-gpu and copies the shared libraries into build-gpu/lib (libuv,
# cJSON, and libseccomp for vram-seccomp: scripts/gpu-seccomp.sh).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
b=${VRAM_GPU_BUILD:-$root/build-gpu}
if [ "${1:-}" = "--prepare" ] || [ ! -x "$b/tests/test_gpu" ]; then
    cmake -S "$root" -B "$b" -DVRAM_GPU_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
        cmake --build "$b" -j"$(nproc)" >/dev/null || exit 1
    mkdir -p "$b/lib"
    for l in libuv.so.1 libcjson.so.1 libseccomp.so.2; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
        [ -n "$p" ] && cp -L "$p" "$b/lib/$l"
    done
    [ "${1:-}" = "--prepare" ] && exit 0
fi
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$b/lib:$b:${LD_LIBRARY_PATH:-}"
export VRAMD_BIN="$b/vramd" VRAMCTL_BIN="$b/vramctl" VRAM_REPLAY_BIN="$b/vram-replay"
export VRAM_SOURCE_DIR="$root"
# Keep NVLink multicast off (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >>"$out/nvidia-smi.txt" 2>&1
rc=0
echo "== vramd on cuda: devices, start-up, its own GPU memory (the context cost)"
"$b/vramd" --backend cuda --socket "$out/probe.sock" --log-level debug \
    >"$out/vramd-cuda.log" 2>&1 &
vp=$!
sleep 4
"$b/vramctl" --socket "$out/probe.sock" status --json >"$out/status-cuda.json" 2>&1
"$b/vramctl" --socket "$out/probe.sock" status
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv \
    >"$out/vramd-gpu-memory.csv" 2>&1
cat "$out/vramd-gpu-memory.csv"
kill $vp; wait $vp
grep -E "context|ready|unavailable" "$out/vramd-cuda.log" | head -n 5
echo "== test_gpu"
timeout 240 "$b/tests/test_gpu" ${GPU_TESTS:-} >"$out/test_gpu.log" 2>&1 || rc=1
tail -n 12 "$out/test_gpu.log"
echo "== weight sets: 64 GiB mapped against reloaded, and across vramd's kill -9"
VRAM_GPU_WEIGHTS_BENCH=1 timeout 300 "$b/tests/test_gpu" weights_bench \
    >"$out/weights_bench.log" 2>&1 || rc=1
grep '^{' "$out/weights_bench.log"; tail -n 2 "$out/weights_bench.log"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
seed=seed-pp32-16.json
[ "$gpus" -lt 2 ] && seed=seed-pp32-16-1gpu.json
echo "== seed replay on cuda ($gpus GPUs: $seed)"
VRAM_TEST_BACKEND=cuda timeout 90 "$b/tests/test_seed_replay" "$seed" \
    >"$out/seed_replay_cuda.log" 2>&1 || rc=1
tail -n 3 "$out/seed_replay_cuda.log"
echo "== the engine API contract on cuda (events, figures, event thread)"
VRAM_TEST_BACKEND=cuda timeout 90 "$b/tests/test_engine_contract" \
    >"$out/engine_contract_cuda.log" 2>&1 || rc=1
tail -n 3 "$out/engine_contract_cuda.log"
echo "== the Python package on cuda (torch tensors over chunks, a CUDA graph)"
VRAM_TEST_BACKEND=cuda VRAM_LIB="$b/libvram.so" \
    VRAM_TORCH_ALLOC="$b/libvram_torch_alloc.so" timeout 180 \
    python3 -m unittest discover -s "$root/tests/python" -p 'test_vram*.py' -v \
    >"$out/python_cuda.log" 2>&1 || rc=1
tail -n 3 "$out/python_cuda.log"
echo "== the MoE engine example on cuda, token for token against plain CUDA memory"
VRAM_TEST_BACKEND=cuda VRAM_LIB="$b/libvram.so" VRAM_MOE_LOG="$out" timeout 300 \
    python3 -m unittest discover -s "$root/tests/python" -p 'test_moe*.py' -v \
    >"$out/moe_engine_cuda.log" 2>&1 || rc=1
tail -n 3 "$out/moe_engine_cuda.log"
# The transformers integration (issue 27): one log per script (the example's
# two runs in one). The example's token check runs at --small (plain memory
# first, then vramd); the seed-shaped run, for its table, comes after, with
# TF_EXAMPLE_ARGS added to its arguments (--check compares its tokens too,
# in about twice the time).
tf() {  # log name, seconds, script and its arguments; ">>NAME" appends
    n=$1; s=$2; shift 2
    case $n in
    '>>'*) n=${n#>>}; exec 3>>"$out/transformers_$n.log" ;;
    *) exec 3>"$out/transformers_$n.log" ;;
    esac
    VRAM_LIB="$b/libvram.so" timeout "$s" python3 "$@" >&3 2>&1 || rc=1
    exec 3>&-
    tail -n 2 "$out/transformers_$n.log"
}
if [ -n "${NO_TF:-}" ]; then
    echo "== transformers: skipped: NO_TF is set"
elif tfwhy=$(VRAM_LIB="$b/libvram.so" python3 "$root/tests/gpu/gpu_transformers_common.py" 2>&1); then
    echo "== transformers: VramCache and expert loans (tokens, addresses, a recall)"
    tf cache 180 "$root/tests/python/gpu_transformers_cache.py"
    echo "== transformers: the example, --small --check, then seed-shaped (the table)"
    tf moe 300 "$root/examples/transformers_moe.py" --small --check
    tf '>>moe' 600 "$root/examples/transformers_moe.py" ${TF_EXAMPLE_ARGS:-}
    echo "== transformers: decode tokens/s, VramCache against DynamicCache"
    tf bench 300 "$root/tests/gpu/gpu_transformers_bench.py"
    grep '^{' "$out/transformers_bench.log"
    echo "== transformers: a CUDA graph over VramCache, replayed across budget changes"
    tf graph 300 "$root/tests/gpu/gpu_transformers_graph.py"
else
    echo "== transformers: $tfwhy"
fi
if [ -x "$b/tests/vram-bench" ] && [ -z "${NO_BENCH:-}" ]; then
    echo "== benchmark"
    timeout 200 "$b/tests/vram-bench" --backend all --out "$out/bench.jsonl" \
        >"$out/bench.log" 2>&1 || rc=1
    tail -n 5 "$out/bench.log"
    # The same moves on a device the size of the card: no cost per chunk may
    # grow with the device.
    timeout 200 "$b/tests/vram-bench" --backend cuda --capacity 128GiB \
        --out "$out/bench-128g.jsonl" >"$out/bench-128g.log" 2>&1 || rc=1
fi
# What the driver lets a broker overlap (no vramd): explains the cold grant.
if [ -x "$b/tests/vram-bench-driver" ] && [ -z "${NO_BENCH:-}" ]; then
    echo "== driver"
    timeout 120 "$b/tests/vram-bench-driver" --out "$out/driver.jsonl" \
        >"$out/driver.log" 2>&1 || rc=1
    cat "$out/driver.jsonl"
fi
exit $rc
