/* env.c — validation of the DEEPINFER_* environment variables (see env.h). */
#include "base/env.h"

#include "base/error.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

extern char **environ;

static int parse_long(const char *s, long *out) {
    char *end;
    if (!s || !*s) return -1;
    long v = strtol(s, &end, 10);
    if (*end) return -1;
    *out = v;
    return 0;
}

static int check_bool01(const char *name, const char *v) {
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) return 0;
    return di_errorf("%s='%s': expected 0 or 1", name, v);
}

static int check_accelerator(const char *name, const char *v) {
    if (strcmp(v, "cpu") == 0) return 0;
    if (strcmp(v, "nvidia") == 0)
        return di_errorf("%s=nvidia: the CUDA backend is not in this build yet; use cpu (the default)", name);
    return di_errorf("%s='%s': expected cpu or nvidia", name, v);
}

static int check_nextn(const char *name, const char *v) {
    long n;
    if (parse_long(v, &n) != 0 || n < 0 || n > 16) return di_errorf("%s='%s': expected a draft length from 0 to 16", name, v);
    if (n > 0)
        return di_errorf("%s=%ld: DSpark speculative decoding is not implemented yet; set 0 or unset it", name, n);
    return 0;
}

static int check_mtp_varlen(const char *name, const char *v) {
    if (check_bool01(name, v) != 0) return -1;
    if (strcmp(v, "1") == 0) return di_errorf("%s=1: DSpark speculative decoding is not implemented yet", name);
    return 0;
}

static int check_yoco_mode(const char *name, const char *v) {
    if (strcmp(v, "off") == 0) return 0;
    if (strcmp(v, "compact") == 0)
        return di_errorf("%s=compact: decoder sliding-window bounded replay is not implemented yet; use off", name);
    return di_errorf("%s='%s': expected off or compact", name, v);
}

static int check_keep_tokens(const char *name, const char *v) {
    long n;
    /* Only the form is checked: the count is for bounded replay (TRUNCATION_MODE=compact), which
     * is refused, so nothing reads it yet.  That it covers the model's sliding window (128 in the
     * release) is for bounded replay to check when it lands; no load checks it now. */
    if (parse_long(v, &n) != 0 || n < 1 || n > (1L << 30)) return di_errorf("%s='%s': expected a positive token count", name, v);
    return 0;
}

static int check_log_level(const char *name, const char *v) {
    DiLogLevel level;
    if (di_log_parse_level(v, &level) != 0) return di_error_wrap("%s", name);
    return 0;
}

static int check_threads(const char *name, const char *v) {
    long n;
    if (parse_long(v, &n) != 0 || n < 1 || n > 1024) return di_errorf("%s='%s': expected an integer from 1 to 1024", name, v);
    return 0;
}

static int check_kernels(const char *name, const char *v) {
    if (strcmp(v, "auto") == 0 || strcmp(v, "ref") == 0 || strcmp(v, "simd") == 0 || strcmp(v, "avx2") == 0 ||
        strcmp(v, "avx512") == 0)
        return 0;
    return di_errorf("%s='%s': expected auto, ref, simd, avx2 or avx512", name, v);
}

static int check_fp8_gemv(const char *name, const char *v) {
    if (strcmp(v, "auto") == 0 || strcmp(v, "f32") == 0 || strcmp(v, "fp16") == 0 || strcmp(v, "mapped") == 0) return 0;
    return di_errorf("%s='%s': expected auto, f32, fp16 or mapped", name, v);
}

static int check_any(const char *name, const char *v) {
    (void)name;
    (void)v;
    return 0;
}

typedef struct {
    const char *name;
    int (*check)(const char *name, const char *value);
} EnvVar;

static const EnvVar known[] = {
    {"DEEPINFER_HF_MODEL_DIR", check_any}, /* checked where the model is opened */
    {"DEEPINFER_ACCELERATOR", check_accelerator},
    {"DEEPINFER_BATCH_INVARIANT", check_bool01},
    {"DEEPINFER_ENABLE_MTP_VARLEN", check_mtp_varlen},
    {"DEEPINFER_USE_NEXTN_DECODE", check_nextn},
    {"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", check_yoco_mode},
    {"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", check_keep_tokens},
    {"DEEPINFER_LOG_LEVEL", check_log_level},
    {"DEEPINFER_NUM_THREADS", check_threads},
    {"DEEPINFER_KERNELS", check_kernels},
    {"DEEPINFER_FP8_GEMV", check_fp8_gemv},
    {"DEEPINFER_API_KEY", check_any},
    {"DEEPINFER_LIB", check_any}, /* the Python binding's library override */
    {"DEEPINFER_BENCH_DIR", check_any},  /* bench_decode's checkpoint cache */
    {"DEEPINFER_BENCH_ONLY", check_any}, /* bench_decode: one half only */
};

int di_env_check(void) {
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const char *v = getenv(known[i].name);
        if (v && known[i].check(known[i].name, v) != 0) return -1;
    }
    /* a misspelt variable is a silent no-op otherwise: say so */
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "DEEPINFER_", 10) != 0) continue;
        size_t len = strcspn(*e, "=");
        int found = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0] && !found; i++)
            found = strlen(known[i].name) == len && strncmp(*e, known[i].name, len) == 0;
        if (!found) DI_WARN("unknown environment variable %.*s (ignored)", (int)len, *e);
    }
    return 0;
}
