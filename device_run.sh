#!/bin/bash
# usage: bash device_run.sh STEP...   (gpu, seeds, fuzz A:B, gemm)
set -u
[ -f .tiletc/tile-toolchain.tar.xz ] && mkdir -p .tiletc/root && tar -xJf .tiletc/tile-toolchain.tar.xz -C .tiletc/root
if [ -f .nvj/nvjitlink.xz ]; then xz -dc .nvj/nvjitlink.xz > /tmp/libnvJitLink.so.13; export LD_PRELOAD=/tmp/libnvJitLink.so.13; fi
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1 FEARLESS_CACHE_DIR=/tmp/flcache FEARLESS_TILEIRAS=$PWD/.tiletc/root/bin/tileiras
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
summary=()
while [ $# -gt 0 ]; do
  case $1 in
    gpu) shift; t=$(date +%s); timeout ${GPU_LIMIT:-300} python3 -m pytest -m gpu -p no:cacheprovider -o addopts="" -q ${GPU_ARGS:-} > $OUT/gpu.log 2>&1; summary+=("gpu: $(tail -1 $OUT/gpu.log) ($(( $(date +%s)-t )) s)");;
    seeds) shift; python3 -m tests.fuzz --device --seeds $1 -v > $OUT/seeds.log 2>&1; summary+=("seeds $1: $(grep -A3 'fuzz summary' $OUT/seeds.log | tr '\n' ' ')"); shift;;
    fuzz) shift; t=$(date +%s); python3 -m tests.fuzz --device --seeds $1 --jobs 16 --time-limit ${FUZZ_LIMIT:-540} --out $OUT/fuzz > $OUT/fuzz.log 2>&1; tar -czf $OUT/fuzz_failures.tgz -C $OUT/fuzz failures 2>/dev/null; rm -rf $OUT/fuzz/failures; summary+=("fuzz $1 ($(( $(date +%s)-t )) s):" "$(sed -n '/fuzz summary/,$p' $OUT/fuzz.log)"); shift;;
    rawpow) shift; FEARLESS_CACHE_DIR=/tmp/flcache_raw python3 -c "
import sys, pytest
import fearless.backends.tileir.lower as L
L._pow = lambda b, x, y: b.pow(x, y)
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-o', 'addopts=', '-m', 'gpu', '-k', 'special and tile', 'tests/e2e/test_pow.py']))" > $OUT/rawpow.log 2>&1; summary+=("raw Tile IR pow: $(tail -1 $OUT/rawpow.log)" "$(grep -m3 'AssertionError\|assert' $OUT/rawpow.log | cut -c1-300)");;
    launch) shift; t=$(date +%s); OUT=$OUT timeout ${LAUNCH_LIMIT:-200} python3 benchmarks/bench_launch.py > $OUT/launch.log 2>&1; summary+=("launch ($(( $(date +%s)-t )) s):" "$(tail -30 $OUT/launch.log)");;
    gemm) shift; OUT=$OUT python3 benchmarks/bench_tile.py --sections gemm --quick > $OUT/gemm.log 2>&1; summary+=("gemm:" "$(tail -15 $OUT/gemm.log)");;
    *) echo "unknown step $1"; exit 2;;
  esac
done
grep -E "^(FAILED|ERROR)" $OUT/gpu.log 2>/dev/null | head -30
printf '%s\n' "${summary[@]}"
