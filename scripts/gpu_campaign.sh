#!/usr/bin/env bash
# The GPU campaign in two parts, each one command of at most 300 s of step budgets:
#
#   scripts/gpu_campaign.sh part1 "$OUT"            # on the GPU machine: set-up, kernel bandwidth,
#                                                   # tests under real codegen, bench-triton
#   scripts/gpu_campaign.sh part2 "$OUT"            # bench --gpu (default, CUDA graphs), corpus
#   scripts/gpu_campaign.sh part1 --dry-run OUTDIR  # anywhere: every step's arguments parse
#
# Each part leaves three files in OUTDIR: <part>.tsv, <part>.json, <part>-logs.tar.gz. The steps,
# their budgets and what they write are data in tools/gpu_campaign.py (its docstring is the
# contract); this script only picks the interpreter: the image's python3 on the GPU machine,
# .venv's for a dry run when there is one ($PYTHON overrides both).
set -euo pipefail
cd "$(dirname "$0")/.."
case " $* " in
  *" -h "*|*" --help "*) sed -n '2,12p' "$0"; exit 0 ;;
esac
PY="${PYTHON:-python3}"
if [ -z "${PYTHON:-}" ] && [[ " $* " == *" --dry-run "* ]] && [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
fi
exec "$PY" -m tools.gpu_campaign "$@"
