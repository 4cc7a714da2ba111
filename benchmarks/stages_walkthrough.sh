#!/usr/bin/env bash
# The README's stage-ledger walkthrough on a GPU: softmax from a direct kernel to the tuned reference kernel.
#   benchmarks/stages_walkthrough.sh LEDGER_DIR
set -u
cd "$(dirname "$0")/.."
ledger="${1:-.ptt}/ledger.db"
ptt() { python3 -m mcp_server.cli "$@"; }
ptt stages start softmax reference_kernels/softmax.py:reference_softmax \
    --inputs benchmarks/walkthrough_softmax.py:cases --ledger "$ledger"
ptt stages submit softmax benchmarks/walkthrough/softmax_stage1.py:softmax --stage 1 --ledger "$ledger"
ptt stages submit softmax mcp_server/examples/softmax_triton.py:softmax --stage 2 --ledger "$ledger"
ptt stages submit softmax reference_kernels/softmax.py:softmax_stage3 --stage 3 --ledger "$ledger" \
    --no-autotune-reason "stage 3 picks configs by rules measured on the H200 instead of autotuning"
ptt stages status --ledger "$ledger"
