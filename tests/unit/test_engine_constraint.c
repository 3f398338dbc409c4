/* test_engine_constraint.c — structured outputs through the engine (constraint.h) on the mock
 * model, whose random logits are the hardest client: every constrained output, for many seeds,
 * must be accepted by an independent checker (POSIX <regex.h> for regexes, jansson for JSON, a
 * hand-written recogniser for the EBNF), end by EOS where the language allows it, and bad
 * constraints must fail admission with the problem named. */
#include "test.h"

#include "test_engine_helpers.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>

static DiEngine *make_engine(int async) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.async_scheduling = async;
    o.seed = 5;
    return di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
}

/* Add one request with a one-token prompt, run the engine dry and fetch the output: its id, or
 * 0 when admission or a step failed (the error left in di_error_message()). */
static uint64_t run_request(DiEngine *e, const DiSamplingParams *p, int32_t prompt_token, DiRequestOutput *r) {
    DiRequestInput in = {.prompt_ids = &prompt_token, .n_prompt_ids = 1};
    uint64_t id;
    if (di_engine_add_request(e, &in, p, NULL, NULL, &id) != 0 || di_engine_run(e) != 0) return 0;
    di_engine_get_output(e, id, r);
    return id;
}

/* Run one request with the given constraint; its text goes to out.  Returns the finish reason
 * (-1 when admission failed, the error left in di_error_message()). */
static int run_constrained(DiEngine *e, int type, const char *text, uint64_t seed, char *out, size_t cap) {
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 64;
    p.has_seed = 1;
    p.seed = seed;
    p.constraint_type = type;
    p.constraint = text;
    DiRequestOutput r;
    uint64_t id = run_request(e, &p, ':', &r);
    if (id == 0) return strstr(di_error_message(), "add request") ? -1 : -2;
    snprintf(out, cap, "%.*s", (int)r.text_len, r.text);
    int reason = (int)r.finish_reason;
    if (reason == DI_FINISH_STOP && r.stop_token != DI_MOCK_EOS) reason = -3;
    di_engine_release(e, id);
    return reason;
}

static bool posix_fullmatch(const char *ere, const char *s) {
    char anchored[256];
    snprintf(anchored, sizeof anchored, "^(%s)$", ere);
    regex_t re;
    if (regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB) != 0) return false;
    bool ok = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

TEST(regex_outputs_fullmatch_for_many_seeds_sync_and_async) {
    /* the same pattern in Python-re (the constraint) and POSIX ERE (the checker) spelling */
    static const char *const py[] = {"[a-c]{2,6}x?", "(ab|cd)+e", "[0-9]{1,3}(\\.[0-9]{1,2})?", "(yes|no)"};
    static const char *const ere[] = {"[a-c]{2,6}x?", "(ab|cd)+e", "[0-9]{1,3}([.][0-9]{1,2})?", "(yes|no)"};
    for (int async = 0; async <= 1; async++) {
        DiEngine *e = make_engine(async);
        for (size_t k = 0; k < sizeof py / sizeof *py; k++)
            for (uint64_t seed = 1; seed <= 25; seed++) {
                char out[512];
                int reason = run_constrained(e, DI_CONSTRAINT_REGEX, py[k], seed, out, sizeof out);
                if (k == 1 && reason == DI_FINISH_LENGTH) continue; /* (ab|cd)+ may outgrow 64 tokens */
                CHECK_MSG(reason == DI_FINISH_STOP, "regex %s seed %llu: reason %d (%s)", py[k],
                          (unsigned long long)seed, reason, di_error_message());
                CHECK_MSG(posix_fullmatch(ere[k], out), "regex %s seed %llu: '%s'", py[k], (unsigned long long)seed,
                          out);
            }
        di_engine_destroy(e);
    }
}

/* root ::= "(" root ")" | "x": a balanced nest around one x, checked by counting. */
static bool balanced_x(const char *s) {
    size_t n = strlen(s), open = 0;
    while (open < n && s[open] == '(') open++;
    if (open >= n || s[open] != 'x' || n != 2 * open + 1) return false;
    for (size_t i = open + 1; i < n; i++)
        if (s[i] != ')') return false;
    return true;
}

TEST(ebnf_outputs_are_in_the_language) {
    DiEngine *e = make_engine(1);
    const char *g = "root ::= \"(\" root \")\" | \"x\"";
    int finished = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        char out[512];
        int reason = run_constrained(e, DI_CONSTRAINT_EBNF, g, seed, out, sizeof out);
        CHECK_MSG(reason == DI_FINISH_STOP || reason == DI_FINISH_LENGTH, "seed %llu: %d (%s)",
                  (unsigned long long)seed, reason, di_error_message());
        if (reason == DI_FINISH_STOP) {
            finished++;
            CHECK_MSG(balanced_x(out), "seed %llu: '%s'", (unsigned long long)seed, out);
        }
    }
    CHECK(finished > 10);
    di_engine_destroy(e);
}

TEST(json_schema_and_json_object_outputs_parse) {
    DiEngine *e = make_engine(1);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},"
                         "\"n\":{\"enum\":[1,2,3]}},\"required\":[\"ok\",\"n\"],\"additionalProperties\":false}";
    for (uint64_t seed = 1; seed <= 20; seed++) {
        char out[512];
        int reason = run_constrained(e, DI_CONSTRAINT_JSON_SCHEMA, schema, seed, out, sizeof out);
        CHECK_MSG(reason == DI_FINISH_STOP, "seed %llu: %d (%s) '%s'", (unsigned long long)seed, reason,
                  di_error_message(), out);
        json_t *j = json_loads(out, 0, NULL);
        CHECK_MSG(j && json_is_boolean(json_object_get(j, "ok")) && json_object_size(j) == 2, "'%s'", out);
        json_int_t n = json_integer_value(json_object_get(j, "n"));
        CHECK_MSG(n >= 1 && n <= 3, "'%s'", out);
        json_decref(j);
        reason = run_constrained(e, DI_CONSTRAINT_JSON_OBJECT, NULL, seed, out, sizeof out);
        if (reason == DI_FINISH_STOP) { /* an object the random model closed within 64 tokens */
            j = json_loads(out, JSON_DECODE_ANY, NULL);
            CHECK_MSG(j && json_is_object(j), "json_object seed %llu: '%s'", (unsigned long long)seed, out);
            json_decref(j);
        } else {
            CHECK_MSG(reason == DI_FINISH_LENGTH, "json_object seed %llu: %d (%s)", (unsigned long long)seed, reason,
                      di_error_message());
            CHECK_MSG(out[0] == '{', "json_object seed %llu: '%s'", (unsigned long long)seed, out);
        }
    }
    di_engine_destroy(e);
}

/* vLLM computes logprobs on the masked logits: with (a|b) first, the two letters carry all the
 * probability and every other token is -inf. */
TEST(logprobs_see_the_mask) {
    DiEngine *e = make_engine(0);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 4;
    p.logprobs = 3;
    p.constraint_type = DI_CONSTRAINT_REGEX;
    p.constraint = "a|b";
    DiRequestOutput r;
    CHECK(run_request(e, &p, 'q', &r) != 0);
    CHECK_EQ_INT(r.n_tokens, 2); /* a letter, then EOS (the only token left) */
    const DiTokenLogprobs *lp = &r.logprobs[0];
    double mass = 0;
    for (int i = 0; i < lp->n_top; i++)
        if (isfinite(lp->top_logprobs[i])) {
            CHECK(lp->top_ids[i] == 'a' || lp->top_ids[i] == 'b');
            mass += exp(lp->top_logprobs[i]);
        }
    CHECK_NEAR(mass, 1.0, 1e-5);
    CHECK_NEAR(r.logprobs[1].logprob, 0.0, 1e-6); /* EOS was certain */
    CHECK_EQ_INT(r.logprobs[1].token, DI_MOCK_EOS);
    di_engine_destroy(e);
}

TEST(constraint_applies_after_the_end_of_thinking) {
    DiEngine *e = make_engine(1);
    for (uint64_t seed = 1; seed <= 10; seed++) {
        DiSamplingParams p;
        di_sampling_params_init(&p);
        p.max_tokens = 32;
        p.has_seed = 1;
        p.seed = seed;
        p.constraint_type = DI_CONSTRAINT_REGEX;
        p.constraint = "[xyz]{3}";
        p.constraint_after_think = 1;
        p.think_end_id = 299; /* text " w299": never grammar text for [xyz] */
        DiLogitBias bias = {299, 100.0f};
        p.logit_bias = &bias; /* </think> comes first; after it the mask keeps it out */
        p.n_logit_bias = 1;
        DiRequestOutput r;
        uint64_t id = run_request(e, &p, 't', &r);
        CHECK(id != 0);
        CHECK_EQ_INT(r.n_tokens, 5); /* </think>, three letters, EOS */
        CHECK_EQ_INT(r.token_ids[0], 299);
        for (int i = 1; i < 4; i++) CHECK(r.token_ids[i] >= 'x' && r.token_ids[i] <= 'z');
        CHECK_EQ_INT(r.token_ids[4], DI_MOCK_EOS);
        di_engine_release(e, id);
    }
    di_engine_destroy(e);
}

static void expect_refused(DiEngine *e, int type, const char *text, const char *needle) {
    char out[64];
    CHECK_EQ_INT(run_constrained(e, type, text, 1, out, sizeof out), -1);
    CHECK_MSG(strstr(di_error_message(), needle) != NULL, "'%s' lacks '%s'", di_error_message(), needle);
}

TEST(bad_constraints_fail_admission_naming_the_problem) {
    DiEngine *e = make_engine(1);
    expect_refused(e, DI_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"object\",\"patternProperties\":{}}", "patternProperties");
    expect_refused(e, DI_CONSTRAINT_JSON_SCHEMA, "{not json", "json_schema");
    expect_refused(e, DI_CONSTRAINT_REGEX, "(ab", "regex");
    expect_refused(e, DI_CONSTRAINT_EBNF, "root ::= undefined_rule", "undefined_rule");
    expect_refused(e, DI_CONSTRAINT_REGEX, NULL, "needs the constraint text");
    expect_refused(e, DI_CONSTRAINT_JSON_OBJECT, "{}", "takes none");
    expect_refused(e, 9, "x", "constraint_type");
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.constraint_type = DI_CONSTRAINT_REGEX;
    p.constraint = "a";
    p.ignore_eos = 1;
    CHECK(di_sampling_params_check(&p, MOCK_VOCAB) != 0);
    CHECK(strstr(di_error_message(), "ignore_eos") != NULL);
    /* the engine still serves after refusals */
    char out[64];
    CHECK_EQ_INT(run_constrained(e, DI_CONSTRAINT_REGEX, "ok", 1, out, sizeof out), DI_FINISH_STOP);
    CHECK_STR(out, "ok");
    di_engine_destroy(e);
}

/* min_tokens cannot outlast a grammar that is complete: "ab" ends after 2 tokens even with
 * min_tokens 6, and the unconstrained request sharing its steps is untouched. */
TEST(a_complete_grammar_ends_before_min_tokens_without_failing_the_batch) {
    DiEngine *e = make_engine(0);
    DiSamplingParams c, free_run;
    di_sampling_params_init(&c);
    c.max_tokens = 10;
    c.min_tokens = 6;
    c.constraint_type = DI_CONSTRAINT_REGEX;
    c.constraint = "ab";
    di_sampling_params_init(&free_run);
    free_run.max_tokens = 10;
    free_run.ignore_eos = 1;
    int32_t prompt = 'q';
    DiRequestInput in = {.prompt_ids = &prompt, .n_prompt_ids = 1};
    uint64_t a, b;
    CHECK(di_engine_add_request(e, &in, &c, NULL, NULL, &a) == 0);
    CHECK(di_engine_add_request(e, &in, &free_run, NULL, NULL, &b) == 0);
    CHECK(di_engine_run(e) == 0);
    DiRequestOutput r;
    di_engine_get_output(e, a, &r);
    CHECK_EQ_INT(r.n_tokens, 3);
    CHECK_STR(r.text, "ab");
    CHECK_EQ_INT(r.finish_reason, DI_FINISH_STOP);
    di_engine_get_output(e, b, &r);
    CHECK_EQ_INT(r.n_tokens, 10);
    CHECK_EQ_INT(r.finish_reason, DI_FINISH_LENGTH);
    di_engine_destroy(e);
}

typedef struct {
    DiEngine *e;
    int failures;
} PrepareJob;

/* A server's request thread: compiles schemas while the engine steps. */
static void *prepare_many(void *arg) {
    PrepareJob *j = arg;
    char re[32];
    for (int i = 0; i < 40; i++) {
        snprintf(re, sizeof re, "[a-c]{%d}", 1 + i % 7);
        j->failures += di_engine_prepare_constraint(j->e, DI_CONSTRAINT_REGEX, re) != 0;
    }
    j->failures += di_engine_prepare_constraint(j->e, DI_CONSTRAINT_REGEX, "(bad") == 0; /* must fail */
    return NULL;
}

TEST(constraints_prepare_on_another_thread_while_the_engine_steps) {
    DiEngine *e = make_engine(1);
    CHECK(di_engine_prepare_constraint(e, DI_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"object\",\"patternProperties\":{}}") != 0);
    CHECK(strstr(di_error_message(), "patternProperties") != NULL);
    PrepareJob job = {e, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, prepare_many, &job) == 0);
    for (uint64_t seed = 1; seed <= 20; seed++) {
        char out[128], re[32];
        snprintf(re, sizeof re, "[a-c]{%d}", 1 + (int)(seed % 7));
        CHECK_EQ_INT(run_constrained(e, DI_CONSTRAINT_REGEX, re, seed, out, sizeof out), DI_FINISH_STOP);
        CHECK_MSG(posix_fullmatch(re, out), "%s: '%s'", re, out);
    }
    pthread_join(t, NULL);
    CHECK_EQ_INT(job.failures, 0);
    di_engine_destroy(e);
}

int main(void) {
    RUN_TEST(regex_outputs_fullmatch_for_many_seeds_sync_and_async);
    RUN_TEST(ebnf_outputs_are_in_the_language);
    RUN_TEST(json_schema_and_json_object_outputs_parse);
    RUN_TEST(logprobs_see_the_mask);
    RUN_TEST(constraint_applies_after_the_end_of_thinking);
    RUN_TEST(bad_constraints_fail_admission_naming_the_problem);
    RUN_TEST(constraints_prepare_on_another_thread_while_the_engine_steps);
    RUN_TEST(a_complete_grammar_ends_before_min_tokens_without_failing_the_batch);
    return TEST_SUMMARY();
}
