/* env.c — the environment variables: their validation and the accessors that read them (see
 * env.h).  No other source calls getenv (tests/cli/test_module_hygiene.sh checks it). */
#include "base/env.h"

#include "base/error.h"
#include "base/log.h"

#include <errno.h>
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
    return 0;
}

static int check_yoco_mode(const char *name, const char *v) {
    if (strcmp(v, "off") == 0 || strcmp(v, "compact") == 0) return 0;
    return di_errorf("%s='%s': expected off or compact", name, v);
}

static int check_keep_tokens(const char *name, const char *v) {
    long n;
    /* Only the form is checked here: that the count covers the model's sliding window is checked
     * when a model loads (model_prefill_replay_from_env, replay.c, called by engine_model.c and
     * model_api.c), the first point that knows the window. */
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

static int check_seed(const char *name, const char *v) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (!*v || *end || errno || v[0] == '-') return di_errorf("%s='%s': expected a seed (an integer >= 0)", name, v);
    (void)n;
    return 0;
}

/* The values of the choice variables, in the order of their enums in env.h. */
static const char *const kernels_names[] = {"auto", "ref", "simd", "avx2", "avx512", "neon", NULL};
static const char *const fp8_gemv_names[] = {"auto", "f32", "fp16", "mapped", NULL};

/* The index of v in the NULL-terminated names, -1 when it is none of them. */
static int choice_index(const char *const *names, const char *v) {
    for (int i = 0; names[i]; i++)
        if (strcmp(v, names[i]) == 0) return i;
    return -1;
}

static int check_kernels(const char *name, const char *v) {
    if (choice_index(kernels_names, v) >= 0) return 0;
    return di_errorf("%s='%s': expected auto, ref, simd, avx2, avx512 or neon", name, v);
}

static int check_fp8_gemv(const char *name, const char *v) {
    if (choice_index(fp8_gemv_names, v) >= 0) return 0;
    return di_errorf("%s='%s': expected auto, f32, fp16 or mapped", name, v);
}

static const char *const pd_msg_names[] = {"BEGIN", "STATE", "DONE", "ABORT", NULL};

/* One item "drop:MSG", "dup:MSG" or "delay:MSG:Nms" of DEEPINFER_TEST_PD_FAULTS into *out. */
static int parse_pd_fault(const char *item, size_t len, DiEnvPdFaults *out) {
    char buf[64], *end;
    if (len >= sizeof buf) return di_errorf("'%.*s...': too long", 20, item);
    memcpy(buf, item, len);
    buf[len] = 0;
    char *kind = buf, *msg = strchr(buf, ':'), *arg = NULL;
    if (!msg) return di_errorf("'%s': expected drop:MSG, dup:MSG or delay:MSG:Nms", buf);
    *msg++ = 0;
    if ((arg = strchr(msg, ':'))) *arg++ = 0;
    int m = choice_index(pd_msg_names, msg);
    if (m < 0) return di_errorf("'%.*s': unknown message '%s' (expected BEGIN, STATE, DONE or ABORT)", (int)len, item, msg);
    bool delay = strcmp(kind, "delay") == 0;
    if (!delay && strcmp(kind, "drop") != 0 && strcmp(kind, "dup") != 0)
        return di_errorf("'%.*s': unknown fault '%s' (expected drop, dup or delay)", (int)len, item, kind);
    if (delay != (arg != NULL)) return di_errorf("'%.*s': only delay takes a duration (delay:MSG:Nms)", (int)len, item);
    if (delay) {
        long ms = strtol(arg, &end, 10);
        if (end == arg || strcmp(end, "ms") != 0 || ms < 0 || ms > 60000)
            return di_errorf("'%.*s': expected a duration like 500ms (0 .. 60000 ms)", (int)len, item);
        out->delay_ms[m] = (int)ms;
    } else if (strcmp(kind, "drop") == 0) {
        out->drop[m] = true;
    } else {
        out->dup[m] = true;
    }
    out->any = true;
    return 0;
}

int di_env_parse_pd_faults(const char *spec, DiEnvPdFaults *out) {
    if (!out) return di_errorf("di_env_parse_pd_faults: no output");
    memset(out, 0, sizeof *out);
    if (!spec) return 0;
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, ",");
        if (len == 0) return di_errorf("DEEPINFER_TEST_PD_FAULTS='%s': an empty item", spec);
        if (parse_pd_fault(p, len, out) != 0) return di_error_wrap("DEEPINFER_TEST_PD_FAULTS (test-only)");
        p += len + (p[len] == ',');
    }
    return 0;
}

static int check_pd_faults(const char *name, const char *v) {
    (void)name;
    DiEnvPdFaults f;
    return di_env_parse_pd_faults(v, &f);
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
    {"DEEPINFER_ENABLE_MTP_VARLEN", check_bool01},
    {"DEEPINFER_USE_NEXTN_DECODE", check_nextn},
    {"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", check_yoco_mode},
    {"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", check_keep_tokens},
    {"DEEPINFER_LOG_LEVEL", check_log_level},
    {"DEEPINFER_NUM_THREADS", check_threads},
    {"DEEPINFER_KERNELS", check_kernels},
    {"DEEPINFER_FP8_GEMV", check_fp8_gemv},
    {"DEEPINFER_API_KEY", check_any},
    {"DEEPINFER_CLUSTER_KEY", check_any}, /* checked where it is loaded (kv_msg.h) */
    {"DEEPINFER_TEST_PD_FAULTS", check_pd_faults}, /* test-only fault injection */
    {"DEEPINFER_TEST_FAIL_SEED", check_seed},      /* test-only: sampling fails for this seed */
    {"DEEPINFER_LIB", check_any}, /* the Python binding's library override */
    {"DEEPINFER_BENCH_DIR", check_any},  /* bench_decode's checkpoint cache */
    {"DEEPINFER_BENCH_ONLY", check_any}, /* bench_decode: one half only */
};

/* ---- the accessors: the one place the process reads its environment ------------------------ */

/* The value of a variable; NULL when it is unset or empty (the two mean the same everywhere). */
static const char *value_of(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

const char *di_env_hf_model_dir(void) { return value_of("DEEPINFER_HF_MODEL_DIR"); }

const char *di_env_xdg_cache_home(void) { return value_of("XDG_CACHE_HOME"); }

const char *di_env_home(void) { return value_of("HOME"); }

const char *di_env_api_key(void) { return value_of("DEEPINFER_API_KEY"); }
const char *di_env_cluster_key(void) { return value_of("DEEPINFER_CLUSTER_KEY"); }

int di_env_batch_invariant(int *out) {
    if (!out) return di_errorf("di_env_batch_invariant: no output");
    const char *v = value_of("DEEPINFER_BATCH_INVARIANT");
    *out = 0;
    if (!v || strcmp(v, "0") == 0) return 0;
    if (strcmp(v, "1") == 0) return *out = 1, 0;
    return di_errorf("DEEPINFER_BATCH_INVARIANT must be 0 or 1, got \"%s\"", v);
}

int di_env_num_threads(int *out) {
    if (!out) return di_errorf("di_env_num_threads: no output");
    const char *v = value_of("DEEPINFER_NUM_THREADS");
    long n = 0;
    *out = 0;
    if (!v) return 0;
    if (check_threads("DEEPINFER_NUM_THREADS", v) != 0) return -1;
    parse_long(v, &n);
    *out = (int)n;
    return 0;
}

int di_env_draft_max(int *out) {
    if (!out) return di_errorf("di_env_draft_max: no output");
    const char *v = value_of("DEEPINFER_USE_NEXTN_DECODE");
    long n = 5;
    if (v && check_nextn("DEEPINFER_USE_NEXTN_DECODE", v) != 0) return -1;
    if (v) parse_long(v, &n);
    *out = (int)n;
    return 0;
}

int di_env_draft_varlen(int *out) {
    if (!out) return di_errorf("di_env_draft_varlen: no output");
    const char *v = value_of("DEEPINFER_ENABLE_MTP_VARLEN");
    *out = 1;
    if (!v) return 0;
    if (check_bool01("DEEPINFER_ENABLE_MTP_VARLEN", v) != 0) return -1;
    *out = strcmp(v, "1") == 0;
    return 0;
}

int di_env_log_level(DiLogLevel *out) {
    if (!out) return di_errorf("di_env_log_level: no output");
    const char *v = value_of("DEEPINFER_LOG_LEVEL");
    return v ? di_log_parse_level(v, out) : 0;
}

int di_env_kernels(DiEnvKernels *out) {
    if (!out) return di_errorf("di_env_kernels: no output");
    const char *v = value_of("DEEPINFER_KERNELS");
    int i = v ? choice_index(kernels_names, v) : DI_ENV_KERNELS_AUTO;
    if (i < 0) return di_errorf("DEEPINFER_KERNELS=%s: expected auto, ref, simd, avx2, avx512 or neon", v);
    *out = (DiEnvKernels)i;
    return 0;
}

const char *di_env_kernels_name(DiEnvKernels k) {
    return k >= DI_ENV_KERNELS_AUTO && k <= DI_ENV_KERNELS_NEON ? kernels_names[k] : "?";
}

int di_env_fp8_gemv(DiEnvFp8Gemv *out) {
    if (!out) return di_errorf("di_env_fp8_gemv: no output");
    const char *v = value_of("DEEPINFER_FP8_GEMV");
    int i = v ? choice_index(fp8_gemv_names, v) : DI_ENV_FP8_GEMV_AUTO;
    if (i < 0) return di_errorf("DEEPINFER_FP8_GEMV=%s: expected auto, f32, fp16 or mapped", v);
    *out = (DiEnvFp8Gemv)i;
    return 0;
}

int di_env_kernel_knobs(DiEnvKernelKnobs *out) {
    if (!out) return di_errorf("di_env_kernel_knobs: no output");
    return di_env_kernels(&out->kernels) != 0 || di_env_fp8_gemv(&out->fp8_gemv) != 0 ? -1 : 0;
}

int di_env_prefill_replay(DiEnvPrefillReplay *out) {
    if (!out) return di_errorf("di_env_prefill_replay: no output");
    const char *mode = value_of("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE"), *keep = value_of("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS");
    *out = (DiEnvPrefillReplay){0, 0};
    if (mode && check_yoco_mode("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", mode) != 0) return -1;
    if (keep && check_keep_tokens("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", keep) != 0) return -1;
    out->compact = mode && strcmp(mode, "compact") == 0;
    if (keep) parse_long(keep, &out->keep);
    return 0;
}

int di_env_test_fail_seed(bool *set, uint64_t *seed) {
    if (!set || !seed) return di_errorf("di_env_test_fail_seed: no output");
    const char *v = value_of("DEEPINFER_TEST_FAIL_SEED");
    *set = false;
    *seed = 0;
    if (!v) return 0;
    if (check_seed("DEEPINFER_TEST_FAIL_SEED", v) != 0) return -1;
    *set = true;
    *seed = strtoull(v, NULL, 10);
    return 0;
}

int di_env_pd_faults(DiEnvPdFaults *out) { return di_env_parse_pd_faults(value_of("DEEPINFER_TEST_PD_FAULTS"), out); }

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
