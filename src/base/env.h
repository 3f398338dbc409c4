/* env.h — the DEEPINFER_* environment variables, checked in one place.
 *
 * architecture.md fixes the names users know; a bad value must be an error, never silently
 * ignored.  Some variables name features this build does not have yet (the CUDA backend): their
 * "off" values are accepted and anything that would turn them on is refused with the reason, so nobody believes they are on.
 * Every read of the environment goes through the accessors below: each knob is parsed here, in
 * one way, and its value passed to the code that uses it.  Unset and empty mean the same. */
#ifndef DI_BASE_ENV_H
#define DI_BASE_ENV_H

#include "base/log.h"

#include <stdbool.h>
#include <stdint.h>

/* Checks every DEEPINFER_* variable that is set; -1 with an error naming the first bad one. */
int di_env_check(void);

/* DEEPINFER_HF_MODEL_DIR, XDG_CACHE_HOME, HOME: the value, NULL when unset or empty. */
const char *di_env_hf_model_dir(void);
const char *di_env_xdg_cache_home(void);
const char *di_env_home(void);
/* DEEPINFER_API_KEY (serve's bearer token): the value, NULL when unset or empty. */
const char *di_env_api_key(void);
/* DEEPINFER_CLUSTER_KEY (the PD cluster key itself, when no --cluster-key file is given): the
 * value, NULL when unset or empty. */
const char *di_env_cluster_key(void);

/* DEEPINFER_BATCH_INVARIANT into *out (0 when unset); -1 with an error for anything but 0 or 1. */
int di_env_batch_invariant(int *out);
/* DEEPINFER_NUM_THREADS into *out (0 when unset); -1 with an error outside 1 .. 1024. */
int di_env_num_threads(int *out);
/* DEEPINFER_USE_NEXTN_DECODE into *out: the most drafts a speculative step verifies per request
 * (5 when unset, 0: no speculation); -1 with an error outside 0 .. 16. */
int di_env_draft_max(int *out);
/* DEEPINFER_ENABLE_MTP_VARLEN into *out: 1 (unset) draft lengths from the drafter's confidence,
 * 0 fixed lengths (the deterministic mode); -1 with an error for anything but 0 or 1. */
int di_env_draft_varlen(int *out);
/* DEEPINFER_LOG_LEVEL into *out (left alone when unset); -1 with an error for an unknown level. */
int di_env_log_level(DiLogLevel *out);

/* DEEPINFER_KERNELS (unset: auto); -1 with an error naming the variable for any other value.
 * avx2 and avx512 name x86-64 tables, neon the aarch64 one (kernels/backend.h). */
typedef enum {
    DI_ENV_KERNELS_AUTO,
    DI_ENV_KERNELS_REF,
    DI_ENV_KERNELS_SIMD,
    DI_ENV_KERNELS_AVX2,
    DI_ENV_KERNELS_AVX512,
    DI_ENV_KERNELS_NEON
} DiEnvKernels;
int di_env_kernels(DiEnvKernels *out);
/* The value's spelling ("simd", "avx2", ...), for messages. */
const char *di_env_kernels_name(DiEnvKernels k);

/* DEEPINFER_FP8_GEMV (unset: auto); -1 with an error naming the variable for any other value. */
typedef enum { DI_ENV_FP8_GEMV_AUTO, DI_ENV_FP8_GEMV_F32, DI_ENV_FP8_GEMV_FP16, DI_ENV_FP8_GEMV_MAPPED } DiEnvFp8Gemv;
int di_env_fp8_gemv(DiEnvFp8Gemv *out);

/* The knobs the kernel table is chosen by (kernels/backend.h, di_backend_cpu_select), parsed
 * together once where a model or an engine loads and passed in: no kernel reads them. */
typedef struct {
    DiEnvKernels kernels;
    DiEnvFp8Gemv fp8_gemv;
} DiEnvKernelKnobs;
/* DEEPINFER_KERNELS and DEEPINFER_FP8_GEMV into *out; -1 with an error naming the bad one. */
int di_env_kernel_knobs(DiEnvKernelKnobs *out);

/* DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE (off | compact; unset: off) and
 * DEEPINFER_YOCO_PREFILL_KEEP_TOKENS (a positive count; unset: keep 0, the model's default);
 * -1 with an error naming the variable for a bad value. */
typedef struct {
    int compact;
    long keep;
} DiEnvPrefillReplay;
int di_env_prefill_replay(DiEnvPrefillReplay *out);

/* DEEPINFER_TEST_PD_FAULTS — TEST-ONLY: faults a PD prefill worker's transfer sender injects into
 * its own control messages (kv_transfer.h di_kv_send_set_faults), to test the decode side's
 * deadlines, leases and idempotence.  A comma-separated list of
 *   drop:MSG          the message is never sent (the sender believes it was);
 *   dup:MSG           the message (each chunk of a STATE) is sent twice;
 *   delay:MSG:Nms     the message is held N ms (0 .. 60000) before it is sent;
 * MSG one of BEGIN, STATE, DONE, ABORT.  Never set it in production.  Unset: no faults. */
typedef enum { DI_PD_MSG_BEGIN, DI_PD_MSG_STATE, DI_PD_MSG_DONE, DI_PD_MSG_ABORT, DI_PD_MSGS } DiPdMsg;
typedef struct {
    bool drop[DI_PD_MSGS], dup[DI_PD_MSGS];
    int delay_ms[DI_PD_MSGS];
    bool any;
} DiEnvPdFaults;
/* The variable into *out (no faults when unset); -1 with an error naming it when malformed. */
int di_env_pd_faults(DiEnvPdFaults *out);
/* DEEPINFER_TEST_FAIL_SEED (test-only fault injection): sampling fails for every request whose
 * seed is this one, to prove that one request's failure ends that request alone. */
int di_env_test_fail_seed(bool *set, uint64_t *seed);
/* The same grammar from a string (tests); -1 with an error quoting the bad item. */
int di_env_parse_pd_faults(const char *spec, DiEnvPdFaults *out);

#endif
