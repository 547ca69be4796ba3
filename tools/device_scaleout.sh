#!/usr/bin/env bash
# Issue 19's strong-scaling measurement on the lent 16-core machine, in one run (docs/benchmarks.md,
# "Small jobs and scale-out"). Run from the repository root with `.device` carried
# (/work/shared/device-kit/README.md: no network; the Dask stack, zarr and pydantic come as wheels):
#
#     bash tools/device_scaleout.sh
#
# It installs the wheels into /tmp/site, then runs tools/bench_scaleout.py on a text store of
# 786 432 rows x 2^16 columns (8192 used), 20 classes, and an extreme store of 50 000 x 50 000,
# K = 10 000, both in 64 chunks, at N = 1, 2, 4, 8, 16 workers (stagewise, bcd, ppdsparse), and
# writes under $OUT: scaleout.json (every run: wall, breakdown, memory per worker, identical
# models), scaleout.log (the printed tables), lscpu.txt. About 5-6 minutes there.
#
# Environment:
#   SCALE=small        49 152 rows, extreme 5000 x 20 000 with K = 500, N = 1, 2 (a rehearsal)
#   WORKERS=1,2,8,16   other N (default 1,2,4,8,16; small: 1,2)
#   BENCH_TIMEOUT=400  seconds for the benchmark as a whole (killed after; the JSON holds the
#                      runs finished by then); RUN_LIMIT=150: seconds per train() run
#   EXTRA_CMD='...'    one more command run after it (e.g. another benchmark writing to $OUT),
#                      its output in $OUT/extra.log; EXTRA_TIMEOUT=180 seconds for it
#   SKIP_INSTALL=1     the wheels are installed already and PYTHONPATH set (a rehearsal elsewhere)
#   INGEST=1           then distributed ingest (issue 18): tools/bench_ingest_workers.py on a generated
#                      JSONL corpus of INGEST_MB=128 MB in 64 files at N = INGEST_WORKERS (default
#                      1,2,4,8,16; small: 1,2 on 16 MB), one pass and IDF, every store checked identical;
#                      $OUT/ingest_workers.json and ingest_workers.log; INGEST_TIMEOUT=240 seconds.
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

if [ "${SCALE:-full}" = small ]; then
  SIZES="--rows 49152 --extreme-rows 5000 --extreme-features 20000 --extreme-classes 500"
  WORKERS=${WORKERS:-1,2}
else
  SIZES="--rows 786432 --extreme-rows 50000 --extreme-features 50000 --extreme-classes 10000"
  WORKERS=${WORKERS:-1,2,4,8,16}
fi
status=0
WORK=$(mktemp -d /tmp/scaleout-XXXXXX)
start=$(date +%s)
if [ "${INGEST:-}" != only ]; then
# shellcheck disable=SC2086  # SIZES is a list of flags
timeout "${BENCH_TIMEOUT:-400}" python3 tools/bench_scaleout.py $SIZES --features 65536 --used 8192 --classes 20 \
  --chunks 64 --solvers ppdsparse,bcd,stagewise --workers "$WORKERS" --time-limit "${RUN_LIMIT:-150}" --workdir "$WORK" \
  --out "$OUT/scaleout.json" 2>&1 | tee "$OUT/scaleout.log"
status=${PIPESTATUS[0]}
echo "bench_scaleout: exit $status after $(($(date +%s) - start)) s" | tee -a "$OUT/scaleout.log"
fi
rm -rf "$WORK"

if [ -n "${INGEST:-}" ]; then
  if [ "${SCALE:-full}" = small ]; then INGEST_MB=${INGEST_MB:-16}; INGEST_WORKERS=${INGEST_WORKERS:-1,2}; fi
  start=$(date +%s)
  timeout "${INGEST_TIMEOUT:-240}" python3 tools/bench_ingest_workers.py --mb "${INGEST_MB:-128}" --files 64 \
    --workers "${INGEST_WORKERS:-1,2,4,8,16}" --modes noidf,idf --workdir /tmp --out-json "$OUT" 2>&1 | tee "$OUT/ingest_workers.log"
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
