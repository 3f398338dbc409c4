/* cmd_generate.c — `deepinfer generate`: one prompt through the engine, streamed to stdout.
 *
 *   deepinfer generate [--model DIR] (--prompt TEXT [--chat [--thinking]] | --prompt-ids 1,2,3)
 *                      [sampling flags] [--mode ref|kvq|exact] [--engram-map FILE|synthetic]
 *                      [--json-schema FILE | --regex R | --grammar FILE]
 *
 * --prompt is plain text encoded with the model's tokenizer (BOS prepended, as Hugging Face's
 * add_special_tokens does); --chat renders it as a user turn with the V4.1 encoding (recipe.md
 * §2) and parses the output (§3): answer to stdout, reasoning to stderr; --prompt-ids prints
 * the generated ids.  Text streams as whole UTF-8 characters (the engine's incremental
 * detokenizer).  A summary (prompt and generated tokens, tokens/s, finish reason) goes to stderr.
 *
 * --mode kvq|exact: the engine runs the reference numerics only ("ref"), so these modes run a
 * plain greedy loop on the model API (di_model_forward), for checking against golden logits. */
#include "commands.h"

#include "base/error.h"
#include "base/file.h"
#include "base/mem.h"
#include "cli_engine.h"
#include "cli_eplb.h"
#include "cli_ep.h"
#include "deepinfer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model_dir, *prompt, *prompt_ids, *engram_map, *mode, *print_map;
    const char *json_schema, *regex, *grammar; /* structured output: a file, the regex, a file */
    bool chat, thinking;
    char *constraint; /* the text of --json-schema / --grammar read, or a copy of --regex */
    DiSamplingParams sp;
    CliDraft draft;
    CliEplb eplb;
    CliEp ep;     /* --expert-parallel */
    int32_t *ids; /* --prompt-ids parsed */
    int n_ids;
} GenerateArgs;

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
            "  --model DIR         checkpoint directory (default: $DEEPINFER_HF_MODEL_DIR, else the built-in\n"
            "                      tiny model, generated on first use)\n"
            "  --prompt TEXT       plain text, encoded with the model's tokenizer (BOS prepended)\n"
            "  --chat              render --prompt as a user turn (V4.1 encoding); the answer goes to stdout,\n"
            "                      the reasoning to stderr\n"
            "  --thinking          with --chat: thinking mode (the model reasons first)\n"
            "  --prompt-ids LIST   comma-separated prompt token ids; generated ids are printed\n"
            "%s%s%s%s"
            "  --mode M            numerics: ref (default, the engine); kvq or exact run a greedy loop on the\n"
            "                      model API (--prompt-ids only), for comparison with golden logits\n"
            "  --engram-map F      Engram compressed-token map: JSON array file, or 'synthetic' (t mod C);\n"
            "                      default DIR/engram_token_map.json, else built from DIR/tokenizer.json\n"
            "  --print-engram-map TOKENIZER_JSON   print the map built from a tokenizer as JSON and exit\n"
            "  --json-schema FILE  constrain the output to the JSON Schema in FILE (structured output)\n"
            "  --regex R           constrain the output to match the regex R (Python re syntax, whole output)\n"
            "  --grammar FILE      constrain the output to the GBNF-style EBNF grammar in FILE (rule root)\n"
            "                      (one of the three; with --chat --thinking it applies after </think>)\n"
            "Output streams to stdout as it is generated; a summary (tokens, tokens/s, finish reason; drafts\n"
            "proposed and accepted; with --eplb-ranks, EPLB's replans and moe_lb) to stderr.\n"
            "Defaults: greedy, --max-tokens 16, --seed 0.\n",
            cli_sampling_help, cli_draft_help, cli_eplb_help, cli_ep_help);
}

/* 0 ok, 1 --help, 2 usage error (message printed) */
static int parse_args(int argc, char **argv, GenerateArgs *a) {
    memset(a, 0, sizeof *a);
    cli_sampling_defaults(&a->sp, 16);
    a->draft = (CliDraft)CLI_DRAFT_DEFAULTS;
    a->eplb = (CliEplb)CLI_EPLB_DEFAULTS;
    a->ep = (CliEp)CLI_EP_DEFAULTS;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) return 1;
        if (strcmp(o, "--chat") == 0 || strcmp(o, "--thinking") == 0) {
            *(o[2] == 'c' ? &a->chat : &a->thinking) = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1, bad = 0;
        if ((strcmp(o, "--expert-parallel") == 0 || strcmp(o, "--ep-prefault") == 0) && cli_ep_flag(o, v, &a->ep, &used, &bad))
            continue;
        if (!v || strncmp(o, "--", 2) != 0) {
            fprintf(stderr, "deepinfer generate: %s '%s'\n", v ? "unexpected argument" : "missing value for", o);
            return 2;
        }
        i++;
        if (cli_ep_flag(o, v, &a->ep, &used, &bad)) {
            /* --ep-timeout, --ep-test-replan-steps, --ep-dispatch */
        } else if (strcmp(o, "--model") == 0) a->model_dir = v;
        else if (strcmp(o, "--prompt") == 0) a->prompt = v;
        else if (strcmp(o, "--prompt-ids") == 0) a->prompt_ids = v;
        else if (strcmp(o, "--engram-map") == 0) a->engram_map = v;
        else if (strcmp(o, "--print-engram-map") == 0) a->print_map = v;
        else if (strcmp(o, "--mode") == 0) a->mode = v;
        else if (strcmp(o, "--json-schema") == 0) a->json_schema = v;
        else if (strcmp(o, "--regex") == 0) a->regex = v;
        else if (strcmp(o, "--grammar") == 0) a->grammar = v;
        else if (!cli_sampling_flag(o, v, &a->sp, &bad) && !cli_draft_flag(o, v, &a->draft, &bad) &&
                 !cli_eplb_flag(o, v, &a->eplb, &bad)) {
            fprintf(stderr, "deepinfer generate: unknown option '%s'\n", o);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "deepinfer generate: invalid value '%s' for %s\n", v, o);
            return 2;
        }
    }
    const char *problem = NULL;
    if (a->print_map) return 0;
    if (!a->prompt == !a->prompt_ids) problem = "give exactly one of --prompt and --prompt-ids";
    else if (a->chat && !a->prompt) problem = "--chat renders --prompt TEXT as a user turn; it needs --prompt";
    else if (a->thinking && !a->chat) problem = "--thinking needs --chat";
    else if (!!a->json_schema + !!a->regex + !!a->grammar > 1) problem = "give at most one of --json-schema, --regex, --grammar";
    else if ((a->json_schema || a->regex || a->grammar) && a->mode && strcmp(a->mode, "ref"))
        problem = "--json-schema / --regex / --grammar constrain the engine's sampling: --mode ref only";
    else if (a->mode && strcmp(a->mode, "ref") && strcmp(a->mode, "kvq") && strcmp(a->mode, "exact"))
        problem = "--mode must be ref, kvq or exact";
    else if (a->eplb.any && a->mode && strcmp(a->mode, "ref"))
        problem = "--eplb-* counts the engine's steps: --mode ref only";
    else if (a->eplb.any && !a->eplb.ranks)
        problem = "--eplb-phase/--eplb-window/--eplb-period/--eplb-redundant need --eplb-ranks N";
    else if (a->ep.on && a->mode && strcmp(a->mode, "ref"))
        problem = "--expert-parallel runs the engine: --mode ref only";
    else if (a->mode && strcmp(a->mode, "ref") && (!a->prompt_ids || a->sp.temperature > 0))
        problem = "--mode kvq|exact runs a greedy loop on --prompt-ids (the engine runs ref numerics only)";
    if (problem) {
        fprintf(stderr, "deepinfer generate: %s\n", problem);
        return 2;
    }
    return 0;
}

static int parse_ids(const char *s, int32_t **out, int *n) {
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = di_malloc((size_t)cap * sizeof *ids, "prompt ids");
    if (!ids) return -1;
    int k = 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return di_errorf("--prompt-ids: '%s' is not a comma-separated list of token ids", s);
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(ids);
        return di_errorf("--prompt-ids: empty prompt");
    }
    *out = ids;
    *n = k;
    return 0;
}

static int check_vocab(const int32_t *ids, int n, int32_t vocab) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= vocab) return di_errorf("--prompt-ids: token %d outside the vocabulary [0, %d)", ids[i], vocab);
    return 0;
}

static void summary(int n_prompt, int n_gen, double seconds, const char *finish, const char *mode) {
    fprintf(stderr, "generate: prompt %d tokens; generated %d tokens in %.3f s (%.2f tokens/s); finish %s; mode %s\n",
            n_prompt, n_gen, seconds, seconds > 0 ? n_gen / seconds : 0.0, finish, mode);
}

/* --mode kvq|exact: greedy decoding on the model API with those numerics. */
static int run_model_loop(const GenerateArgs *a, CliModel *m, const int32_t *prompt, int n_prompt) {
    DiModel *model = di_model_load(m->dir, a->mode);
    DiModelState *st = NULL;
    float *logits = NULL;
    int rc = -1, produced = 0;
    const char *finish = "length";
    if (!model) goto done;
    if (m->engram_map && di_model_set_engram_token_map(model, m->engram_map, m->engram_map_len) != 0) goto done;
    int32_t V = di_model_vocab_size(model);
    if (check_vocab(prompt, n_prompt, V) != 0) goto done;
    if (!(st = di_model_state_new(model)) || !(logits = di_malloc((size_t)V * sizeof *logits, "logits"))) goto done;
    double t0 = cli_now_s();
    if (di_model_forward(model, st, prompt, n_prompt, 0, logits, 0) != 0) goto done;
    for (int k = 0; k < a->sp.max_tokens; k++) {
        int32_t tok = 0;
        for (int32_t v = 1; v < V; v++)
            if (logits[v] > logits[tok]) tok = v; /* ties to the lowest id, like the engine */
        printf("%s%d", k ? " " : "", tok);
        fflush(stdout);
        produced++;
        if (k + 1 == a->sp.max_tokens) break;
        if (di_model_forward(model, st, &tok, 1, di_model_state_positions(st), logits, 0) != 0) goto done;
    }
    printf("\n");
    summary(n_prompt, produced, cli_now_s() - t0, finish, a->mode);
    rc = 0;
done:
    free(logits);
    di_model_state_free(st);
    di_model_free(model);
    return rc;
}

/* Build the request's input: ids as given, the text, or the rendered user turn. */
static int make_input(const GenerateArgs *a, CliModel *m, DiRequestInput *in, int32_t **owned) {
    memset(in, 0, sizeof *in);
    if (a->prompt_ids) {
        in->prompt_ids = a->ids;
        in->n_prompt_ids = a->n_ids;
        return check_vocab(a->ids, a->n_ids, di_engine_vocab_size(m->engine));
    }
    if (!m->tok) return di_errorf("%s has no tokenizer.json: --prompt needs one (use --prompt-ids)", m->dir);
    if (!a->chat) {
        in->prompt_text = a->prompt;
        return 0;
    }
    json_t *user = cli_message("user", a->prompt), *msgs = user ? json_array() : NULL;
    if (!msgs || json_array_append_new(msgs, user) != 0) {
        json_decref(msgs);
        return user ? di_errorf("out of memory") : -1;
    }
    size_t n = 0;
    int rc = cli_render_ids(m->tok, msgs, a->thinking, owned, &n);
    json_decref(msgs);
    in->prompt_ids = *owned;
    in->n_prompt_ids = (int)n;
    return rc;
}

/* The structured-output constraint of the flags into a->sp (files read now; a bad schema is
 * reported by the engine naming the problem).  Thinking mode: after </think>. */
static int set_constraint(GenerateArgs *a, CliModel *m) {
    const char *file = a->json_schema ? a->json_schema : a->grammar;
    if (!file && !a->regex) return 0;
    size_t size = 0;
    if (file && di_read_file(file, &a->constraint, &size) != 0) return di_error_wrap("%s", a->json_schema ? "--json-schema" : "--grammar");
    if (!file && !(a->constraint = di_strdup(a->regex))) return -1;
    if (file && strlen(a->constraint) != size) return di_errorf("%s: the file holds a NUL byte", file);
    a->sp.constraint_type = a->json_schema ? DI_CONSTRAINT_JSON_SCHEMA : a->grammar ? DI_CONSTRAINT_EBNF : DI_CONSTRAINT_REGEX;
    a->sp.constraint = a->constraint;
    if (a->thinking) {
        int32_t end = m->tok ? di_tokenizer_special_id(m->tok, "</think>") : -1;
        if (end < 0) return di_errorf("a structured output in thinking mode needs the tokenizer's </think> token");
        a->sp.constraint_after_think = 1;
        a->sp.think_end_id = end;
    }
    return 0;
}

static int run_engine(GenerateArgs *a, CliModel *m) {
    DiRequestInput in;
    int32_t *owned = NULL;
    CliPrinter pr;
    uint64_t id = 0;
    int rc = -1, active = 1;
    if (cli_printer_init(&pr, a->prompt_ids != NULL, a->chat, a->thinking) != 0) return -1;
    if (make_input(a, m, &in, &owned) != 0) goto done;
    double t0 = cli_now_s();
    if (di_engine_add_request(m->engine, &in, &a->sp, cli_printer_on_delta, &pr, &id) != 0) goto done;
    for (int64_t step = 1; active; step++)
        if (di_engine_step(m->engine, &active) != 0 || cli_ep_after_step(&a->ep, step) != 0) goto done;
    double seconds = cli_now_s() - t0;
    if (cli_printer_finish(&pr, NULL, NULL) != 0) goto done;
    DiRequestOutput out;
    if (di_engine_get_output(m->engine, id, &out) != 0) goto done;
    if (out.finish_reason == DI_FINISH_ERROR) {
        di_errorf("generation failed: %s", di_engine_request_error(m->engine, id));
        goto done;
    }
    summary(out.n_prompt_ids, out.n_tokens, seconds, di_finish_reason_name(out.finish_reason), "ref");
    /* mean-accepted: drafts accepted per verify step */
    fprintf(stderr, "draft: proposed %llu accepted %llu mean-accepted %.2f\n",
            (unsigned long long)out.spec_num_draft_tokens, (unsigned long long)out.spec_num_accepted_tokens,
            out.spec_num_drafts ? (double)out.spec_num_accepted_tokens / (double)out.spec_num_drafts : 0.0);
    cli_eplb_summary(&a->eplb, stderr);
    rc = 0;
done:
    cli_printer_free(&pr);
    free(owned);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    GenerateArgs a;
    int pr = parse_args(argc, argv, &a);
    if (pr == 1) {
        usage(stdout);
        return 0;
    }
    if (pr) {
        usage(stderr);
        return 2;
    }
    if (a.print_map) {
        if (cli_print_engram_map(a.print_map) == 0) return 0;
        fprintf(stderr, "deepinfer generate: %s\n", di_last_error());
        return 1;
    }
    if (a.prompt_ids && parse_ids(a.prompt_ids, &a.ids, &a.n_ids) != 0) {
        fprintf(stderr, "deepinfer generate: %s\n", di_last_error());
        return 2;
    }
    int status, started = cli_ep_start(&a.ep, &status);
    if (started != 0) { /* an expert rank has served the job, or the start failed */
        if (started < 0) fprintf(stderr, "deepinfer generate: %s\n", di_last_error());
        free(a.ids);
        return started < 0 ? 1 : status;
    }
    bool loop = a.mode && strcmp(a.mode, "ref") != 0;
    CliModel m;
    int rc = cli_model_open(&m, a.model_dir, a.engram_map, !loop, &a.draft);
    if (rc == 0 && !loop) rc = set_constraint(&a, &m);
    if (rc == 0 && !loop) rc = cli_ep_eplb_start(&a.ep, &a.eplb, m.engine);
    if (rc == 0) rc = loop ? run_model_loop(&a, &m, a.ids, a.n_ids) : run_engine(&a, &m);
    if (rc) fprintf(stderr, "deepinfer generate: %s\n", di_last_error());
    cli_model_close(&m);
    cli_eplb_stop(&a.eplb); /* after the engine, whose steps feed it */
    cli_ep_finish(&a.ep, rc != 0);
    free(a.ids);
    free(a.constraint);
    return rc ? 1 : 0;
}
