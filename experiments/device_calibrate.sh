#!/usr/bin/env bash
# What ran on the lent GPU machine (docs/calibration.md §7.5): paraplan calibrate's default
# sweep, a second sweep over the shapes of the H100 rows' models, the grouped expert GEMM
# probe and the attention-batch / launch-gap probes. Writes under $OUT (default
# /tmp/paraplan-device): run.log, nvidia_smi.csv, default.yaml, rows.yaml,
# grouped_gemm.json, probes.json. Each step has its own time limit, so a
# failing step leaves the others' files.
#     OUT=/some/dir bash experiments/device_calibrate.sh
set -uo pipefail
OUT=${OUT:-/tmp/paraplan-device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec > >(tee -a "$OUT/run.log") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,memory.total \
    --format=csv | tee "$OUT/nvidia_smi.csv"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
step() { local limit=$1; shift; local t0=$SECONDS; timeout "$limit" "$@"; echo "[rc=$? in $((SECONDS - t0)) s: $*]"; }
step "${LIMIT_DEFAULT:-200}" python3 -m simulator.cli calibrate --out "$OUT/default.yaml"
step "${LIMIT_ROWS:-130}" python3 -m simulator.cli calibrate --out "$OUT/rows.yaml" \
    --model mpt-7b --model mpt-30b --model mpt-70b --model gpt3-175b --model llama2-70b \
    --tp 1,2,4,8 --mbs 1,2 --seqs 2048,4096
step "${LIMIT_GROUPED:-70}" python3 experiments/grouped_gemm_probe.py --out "$OUT/grouped_gemm.json"
step "${LIMIT_PROBES:-90}" python3 experiments/device_probes.py --out "$OUT/probes.json"
date -u
