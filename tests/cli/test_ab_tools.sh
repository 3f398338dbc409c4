#!/usr/bin/env bash
# test_ab_tools.sh — the two A/B tools end to end on this build against itself: kernel_ab (one
# kernel, two builds alternating) and decode_ab (whole decode steps, on the tiny-a golden
# checkpoint): usage errors exit 2, a missing library exits 1 with its cause, and a build against
# itself reports a ratio and the same bits.
set -u
cd "$(dirname "$0")/../.."
SHARED=${SHARED_DIR:-../shared}
LIB=build/libdeepinfer_internal.so # the A/B tools call internals, which the public .so does not export
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

build/kernel_ab >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "kernel_ab without arguments must exit 2"
KERNEL_AB_ACTS=gaussian build/kernel_ab $LIB $LIB fp4 64 64 gemv 1 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bad KERNEL_AB_ACTS must exit 2"
out=$(KERNEL_AB_ACTS=swiglu KERNEL_AB_QUANTISED=1 KERNEL_AB_ENTRY_A=fp4q KERNEL_AB_ENTRY_B=fp4q build/kernel_ab $LIB $LIB fp4 64 256 gemv 1 2 2>&1)
case "$out" in *"n=  1"*"same bits"*"n=  2"*"same bits"*) ok ;; *) bad "kernel_ab fp4q against itself: $out" ;; esac
KERNEL_AB_FP8_SUBNORMALS=2 build/kernel_ab $LIB $LIB fp8 64 64 gemv 1 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "KERNEL_AB_FP8_SUBNORMALS out of [0, 1] must exit 2"
out=$(KERNEL_AB_FP8_SUBNORMALS=0.01 DEEPINFER_FP8_GEMV=fp16 build/kernel_ab $LIB $LIB fp8 64 256 gemv 1 3 2>&1)
case "$out" in *"n=  1"*"same bits"*"n=  3"*"same bits"*) ok ;; *) bad "kernel_ab fp8 with subnormal codes against itself: $out" ;; esac

build/decode_ab >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "decode_ab without arguments must exit 2"
build/decode_ab $LIB $LIB fast >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "decode_ab with an unknown mode must exit 2"
err=$(build/decode_ab /nonexistent/libdeepinfer.so $LIB 2>&1); rc=$?
[ $rc -eq 1 ] && ok || bad "decode_ab with a missing library exit $rc"
case "$err" in *"/nonexistent/libdeepinfer.so"*) ok ;; *) bad "decode_ab missing library cause: $err" ;; esac
# The public library exports no internal function: the tools say which library to give them.
err=$(build/decode_ab build/libdeepinfer.so $LIB 2>&1); rc=$?
[ $rc -eq 1 ] && ok || bad "decode_ab on the public libdeepinfer.so exit $rc"
case "$err" in *"no symbol model_load"*"libdeepinfer_internal.so"*) ok ;; *) bad "decode_ab public library cause: $err" ;; esac
err=$(build/kernel_ab build/libdeepinfer.so $LIB fp8 64 64 gemv 1 2>&1); rc=$?
[ $rc -eq 1 ] && ok || bad "kernel_ab on the public libdeepinfer.so exit $rc"
case "$err" in *"lacks the SIMD kernel entry points"*"libdeepinfer_internal.so"*) ok ;; *) bad "kernel_ab public library cause: $err" ;; esac
CK=$SHARED/golden-v41/tiny-a/checkpoint
if [ -d "$CK" ]; then
    out=$(DECODE_AB_MODEL=$CK build/decode_ab $LIB $LIB ref 2 2>/dev/null); rc=$?
    [ $rc -eq 0 ] && ok || bad "decode_ab on tiny-a exit $rc"
    case "$out" in *"ref numerics, 2 threads"*"B/A "*"same logits (bits) at every step"*) ok ;; *) bad "decode_ab on tiny-a: $out" ;; esac
    case "$out" in *"prefill of the 16-token prompt"*"B/A "*"same last-row logits (bits)"*) ok ;; *) bad "decode_ab prefill line: $out" ;; esac
    out=$(DECODE_AB_PROMPT=40 DECODE_AB_MODEL=$CK build/decode_ab $LIB $LIB exact 1 2>/dev/null)
    case "$out" in *"after a 40-token prompt"*"prefill of the 40-token prompt"*) ok ;; *) bad "decode_ab DECODE_AB_PROMPT=40: $out" ;; esac
    DECODE_AB_PROMPT=0 DECODE_AB_MODEL=$CK build/decode_ab $LIB $LIB >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "DECODE_AB_PROMPT=0 must exit 2"
    err=$(DECODE_AB_MODEL=/nonexistent build/decode_ab $LIB $LIB 2>&1 >/dev/null); rc=$?
    [ $rc -eq 1 ] && ok || bad "decode_ab with a missing checkpoint exit $rc"
    case "$err" in *"loading the checkpoint"*) ok ;; *) bad "decode_ab missing checkpoint cause: $err" ;; esac
else
    bad "$CK not found (set SHARED_DIR)"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
