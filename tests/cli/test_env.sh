#!/usr/bin/env bash
# The DEEPINFER_* environment variables: bad values and features this build lacks are refused with
# the variable named (architecture.md: "a bad value is an error, not silently ignored").
set -u
cd "$(dirname "$0")/../.."
bin=build/deepinfer
pass=0; fail=0
expect() { # description, expected exit, expected stderr fragment, env assignments...
    local what=$1 code=$2 frag=$3; shift 3
    local err rc
    err=$(env "$@" "$bin" eplb </dev/null 2>&1 >/dev/null); rc=$?
    if [ "$rc" -eq "$code" ] && { [ -z "$frag" ] || grep -qF -- "$frag" <<<"$err"; }; then pass=$((pass+1))
    else fail=$((fail+1)); echo "FAIL: $what: exit $rc, stderr: $err"; fi
}
expect "nvidia accelerator refused" 2 "DEEPINFER_ACCELERATOR=nvidia: the CUDA backend is not in this build" DEEPINFER_ACCELERATOR=nvidia
expect "unknown accelerator" 2 "expected cpu or nvidia" DEEPINFER_ACCELERATOR=tpu
expect "draft length too long" 2 "DEEPINFER_USE_NEXTN_DECODE='17': expected a draft length from 0 to 16" DEEPINFER_USE_NEXTN_DECODE=17
expect "varlen garbage" 2 "DEEPINFER_ENABLE_MTP_VARLEN='2': expected 0 or 1" DEEPINFER_ENABLE_MTP_VARLEN=2
expect "draft length garbage" 2 "expected a draft length" DEEPINFER_USE_NEXTN_DECODE=many
expect "batch invariant garbage" 2 "DEEPINFER_BATCH_INVARIANT='yes': expected 0 or 1" DEEPINFER_BATCH_INVARIANT=yes
expect "yoco mode garbage" 2 "DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE='full': expected off or compact" DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=full
expect "keep tokens garbage" 2 "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS='-3'" DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=-3
expect "threads garbage" 2 "DEEPINFER_NUM_THREADS='0'" DEEPINFER_NUM_THREADS=0
expect "log level garbage" 2 "DEEPINFER_LOG_LEVEL: unknown log level 'loud'" DEEPINFER_LOG_LEVEL=loud
expect "kernels garbage" 2 "DEEPINFER_KERNELS='gpu'" DEEPINFER_KERNELS=gpu
# accepted values pass the check (eplb then fails on its empty stdin with exit 1, not 2)
expect "off values accepted" 1 "" DEEPINFER_ACCELERATOR=cpu DEEPINFER_USE_NEXTN_DECODE=0 DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=off DEEPINFER_BATCH_INVARIANT=1
expect "compact accepted" 1 "" DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=128
expect "speculation values accepted" 1 "" DEEPINFER_USE_NEXTN_DECODE=5 DEEPINFER_ENABLE_MTP_VARLEN=1
expect "misspelt variable warned" 1 "unknown environment variable DEEPINFER_ACCELERATR" DEEPINFER_ACCELERATR=cpu
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
