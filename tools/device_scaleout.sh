#!/usr/bin/env bash
# Issue 19's strong-scaling measurement on the lent 16-core machine, in one run of about 9 minutes
# (docs/benchmarks.md, "Small jobs and scale-out"). Run from the repository root with `.device`
# carried (/work/shared/device-kit/README.md: no network; the Dask stack, zarr and pydantic come
# as wheels):
#
#     bash tools/device_scaleout.sh
#
# It installs the wheels into /tmp/site, then
#   0. with CEILING=1: tools/bench_parallel_ceiling.py, the machine's own ceiling (P independent
#      processes running the same probe side by side: memory bandwidth, in-cache arithmetic, the
#      bcd and stagewise kernels on one chunk, text hashing, state file writes and reads) at
#      P = 1, 2, 4, 8, 16 (small: 1, 2) (ceiling.json, ceiling.log; CEILING_TIMEOUT=150 s);
#   1. tools/bench_worker_start.py: train() (bcd) on a small store (1024 rows, 64 chunks), each
#      run in a fresh process, at N = 1 and 16 workers, with Dask's spawn and with streamfit's
#      forkserver: cluster start, first pass, close, wall (worker_start.json, worker_start.log);
#   1b. tools/bench_pass_latency.py: the critical path of one map_reduce pass (64 chunks of 1 ms,
#      results of 8 KiB and of 4200 KiB, a stagewise Gram's upper triangle) at N = LATENCY_WORKERS
#      (default 1,16, 15 passes; small: 1,2 with 16 tasks per thread, the task tree of 16 workers,
#      5 passes): submission, chunk tasks, the sum tree's levels, the result's return, the
#      scheduler's CPU per pass (pass_latency.json, pass_latency.log; LATENCY_TIMEOUT=90 s, 0: skip);
#   2. tools/bench_scaleout.py on a text store of 786 432 rows x 2^16 columns (8192 used),
#      20 classes, and an extreme store of 50 000 x 50 000, K = 10 000, both in 64 chunks, at
#      N = 1, 16, 14, 8, 2 workers in that order (the ends first: a run cut by the time limit
#      loses the middle), solvers ppdsparse, bcd, stagewise: wall, cluster start, close, passes
#      (first pass apart), checkpoints, driver, task compute, transfers, memory per worker,
#      decoded chunks cached over all workers (64 when each worker kept to its share),
#      identical models (scaleout.json, rewritten after each run; scaleout.log: the tables);
# and lscpu.txt, all under $OUT.
#
# Environment:
#   SCALE=small        a rehearsal (12 288 rows, extreme 2000 x 10 000 with K = 200, N = 1, 2)
#   STORE=large        the text store in 64 chunks of 49 152 rows (3 145 728 rows, the chunk
#                      size) instead of 12 288; with it WORKERS defaults to 1,16,8, SOLVERS to
#                      stagewise,bcd and BENCH_TIMEOUT to 480 (its own session: about 10 minutes)
#   WORKERS=1,16,14,8,2  the N of step 2;  SOLVERS=ppdsparse,bcd,stagewise  its solvers
#   WS_WORKERS=1,16    the N of step 1; WS_TIMEOUT=100 seconds for it (0: skip step 1);
#                      WS_METHODS=spawn,forkserver its start methods (forkserver-numba-cold: without
#                      numba's initialisation in the forkserver, as before session 12)
#   BENCH_TIMEOUT=380  seconds for step 2 as a whole (killed after; the JSON holds the runs
#                      finished by then); RUN_LIMIT=150: seconds per train() run
#   EXTRA_CMD='...'    one more command run after it (e.g. another benchmark writing to $OUT),
#                      its output in $OUT/extra.log; EXTRA_TIMEOUT=180 seconds for it
#   SKIP_INSTALL=1     the wheels are installed already and PYTHONPATH set (a rehearsal elsewhere)
#   INGEST=1           then distributed ingest (issue 18): tools/bench_ingest_workers.py on a generated
#                      JSONL corpus of INGEST_MB=128 MB in 64 files at N = INGEST_WORKERS (default
#                      1,2,4,8,16; small: 1,2 on 16 MB), one pass and IDF, every store checked identical,
#                      with the driver's CPU profile and the workers' timeline per run (--profile-driver
#                      --timeline; INGEST_CHUNK_ROWS=2048 rows per chunk; INGEST_FILES=64 files, 1: one
#                      file cut in byte ranges; INGEST_PIECES_PER_THREAD=K: --pieces-per-thread K);
#                      $OUT/ingest_workers.json and ingest_workers.log; INGEST_TIMEOUT=240 s.
#                      INGEST=only: that alone, without bench_scaleout
set -u
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
if [ -z "${SKIP_INSTALL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/numba-cache}
lscpu > "$OUT/lscpu.txt" 2>&1

ROWS=786432
if [ "${STORE:-}" = large ]; then
  ROWS=3145728
  WORKERS=${WORKERS:-1,16,8}
  SOLVERS=${SOLVERS:-stagewise,bcd}
  BENCH_TIMEOUT=${BENCH_TIMEOUT:-480}
fi
if [ "${SCALE:-full}" = small ]; then
  SIZES="--rows 12288 --extreme-rows 2000 --extreme-features 10000 --extreme-classes 200"
  WORKERS=${WORKERS:-1,2}
  WS_WORKERS=${WS_WORKERS:-1,2}
else
  SIZES="--rows $ROWS --extreme-rows 50000 --extreme-features 50000 --extreme-classes 10000"
  WORKERS=${WORKERS:-1,16,14,8,2}
  WS_WORKERS=${WS_WORKERS:-1,16}
fi
status=0
WORK=$(mktemp -d /tmp/scaleout-XXXXXX)

if [ -n "${CEILING:-}" ]; then
  start=$(date +%s)
  CEILING_PROCS=1,2,4,8,16; [ "${SCALE:-full}" = small ] && CEILING_PROCS=1,2
  timeout "${CEILING_TIMEOUT:-150}" python3 tools/bench_parallel_ceiling.py --procs "$CEILING_PROCS" \
    --workdir "$WORK/ceiling" --out "$OUT/ceiling.json" 2>&1 | tee "$OUT/ceiling.log"
  echo "bench_parallel_ceiling: exit ${PIPESTATUS[0]} after $(($(date +%s) - start)) s" | tee -a "$OUT/ceiling.log"
  rm -rf "$WORK/ceiling"
fi

if [ "${WS_TIMEOUT:-100}" != 0 ]; then
  start=$(date +%s)
  timeout "${WS_TIMEOUT:-100}" python3 tools/bench_worker_start.py --workers "$WS_WORKERS" --repeats 1 \
    --methods "${WS_METHODS:-spawn,forkserver}" \
    --workdir "$WORK/worker-start" --out "$OUT/worker_start.json" 2>&1 | tee "$OUT/worker_start.log"
  echo "bench_worker_start: exit ${PIPESTATUS[0]} after $(($(date +%s) - start)) s" | tee -a "$OUT/worker_start.log"
fi

if [ "${LATENCY_TIMEOUT:-90}" != 0 ]; then
  start=$(date +%s)
  LATENCY_FLAGS="--workers ${LATENCY_WORKERS:-1,16} --passes 15"
  [ "${SCALE:-full}" = small ] && LATENCY_FLAGS="--workers ${LATENCY_WORKERS:-1,2} --tasks-per-thread 16 --passes 5"
  # shellcheck disable=SC2086  # LATENCY_FLAGS is a list of flags
  timeout "${LATENCY_TIMEOUT:-90}" python3 tools/bench_pass_latency.py $LATENCY_FLAGS --chunks 64 --result-kb 8,4200 \
    --work-ms 1 --out "$OUT/pass_latency.json" 2>&1 | tee "$OUT/pass_latency.log"
  echo "bench_pass_latency: exit ${PIPESTATUS[0]} after $(($(date +%s) - start)) s" | tee -a "$OUT/pass_latency.log"
fi

start=$(date +%s)
if [ "${INGEST:-}" != only ]; then
# shellcheck disable=SC2086  # SIZES is a list of flags
timeout "${BENCH_TIMEOUT:-380}" python3 tools/bench_scaleout.py $SIZES --features 65536 --used 8192 --classes 20 \
  --chunks 64 --solvers "${SOLVERS:-ppdsparse,bcd,stagewise}" --workers "$WORKERS" --time-limit "${RUN_LIMIT:-150}" \
  --workdir "$WORK" --out "$OUT/scaleout.json" 2>&1 | tee "$OUT/scaleout.log"
status=${PIPESTATUS[0]}
echo "bench_scaleout: exit $status after $(($(date +%s) - start)) s" | tee -a "$OUT/scaleout.log"
fi
rm -rf "$WORK"

if [ -n "${INGEST:-}" ]; then
  if [ "${SCALE:-full}" = small ]; then INGEST_MB=${INGEST_MB:-16}; INGEST_WORKERS=${INGEST_WORKERS:-1,2}; fi
  start=$(date +%s)
  timeout "${INGEST_TIMEOUT:-240}" python3 tools/bench_ingest_workers.py --mb "${INGEST_MB:-128}" \
    --files "${INGEST_FILES:-64}" --workers "${INGEST_WORKERS:-1,2,4,8,16}" --modes noidf,idf \
    --chunk-rows "${INGEST_CHUNK_ROWS:-2048}" ${INGEST_PIECES_PER_THREAD:+--pieces-per-thread "$INGEST_PIECES_PER_THREAD"} \
    --profile-driver --timeline --workdir /tmp --out-json "$OUT" 2>&1 | tee "$OUT/ingest_workers.log"
  ingest_status=${PIPESTATUS[0]}
  echo "bench_ingest_workers: exit $ingest_status after $(($(date +%s) - start)) s" | tee -a "$OUT/ingest_workers.log"
  [ "$status" -eq 0 ] && status=$ingest_status
fi

if [ -n "${EXTRA_CMD:-}" ]; then
  start=$(date +%s)
  timeout "${EXTRA_TIMEOUT:-180}" bash -c "$EXTRA_CMD" > "$OUT/extra.log" 2>&1
  echo "EXTRA_CMD: exit $? after $(($(date +%s) - start)) s" | tee -a "$OUT/extra.log"
  tail -n 40 "$OUT/extra.log"
fi
exit "$status"
