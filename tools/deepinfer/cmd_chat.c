/* cmd_chat.c — `deepinfer chat`: an interactive multi-turn conversation on the engine.
 *
 *   deepinfer chat [--model DIR] [--system TEXT] [--thinking] [sampling flags]
 *
 * Each line read from stdin is one user turn (so a pipe drives it too).  The conversation is
 * rendered with the V4.1 encoding (recipe.md §2) and re-sent whole each turn; the reply streams
 * through the output parser (§3): the answer to stdout, the reasoning to stderr.  Assistant turns
 * are kept as parsed (answer and reasoning); the renderer drops earlier turns' reasoning as the
 * encoding prescribes.  Commands: /reset (forget the conversation, keep --system), /quit.
 *
 * Ctrl-C (SIGINT) during a reply aborts that generation (di_engine_abort) and returns to the
 * prompt; the interrupted turn is dropped from the conversation.  Ctrl-C at the prompt, or EOF,
 * exits.  A turn that fails (e.g. a prompt too long for the state memory) prints its error and
 * the chat goes on; the exit status is then 1.  After each reply a summary line goes to stderr:
 * "[prompt N tokens; generated M tokens; X tokens/s; finish stop|length|abort]". */
#include "commands.h"

#include "base/error.h"
#include "cli_engine.h"
#include "deepinfer.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *model_dir, *system, *engram_map;
    bool thinking;
    DiSamplingParams sp;
    CliDraft draft;
} ChatArgs;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer chat [--model DIR] [--system TEXT] [--thinking] [options]\n"
            "Interactive chat: each line of stdin is a user turn; the answer streams to stdout, the\n"
            "reasoning (--thinking) to stderr.  /reset starts over, /quit (or EOF) exits.  Ctrl-C stops\n"
            "the current reply; Ctrl-C at the prompt exits.\n"
            "  --model DIR         checkpoint directory (default: $DEEPINFER_HF_MODEL_DIR, else the built-in\n"
            "                      tiny model, generated on first use)\n"
            "  --system TEXT       system prompt\n"
            "  --thinking          thinking mode (the model reasons before answering)\n"
            "%s%s"
            "  --engram-map F      Engram compressed-token map (see deepinfer generate --help)\n"
            "Defaults: greedy, --max-tokens 256, --seed 0 (turn k samples with seed + k).\n",
            cli_sampling_help, cli_draft_help);
}

/* 0 ok, 1 --help, 2 usage error (message printed) */
static int parse_args(int argc, char **argv, ChatArgs *a) {
    memset(a, 0, sizeof *a);
    cli_sampling_defaults(&a->sp, 256);
    a->draft = (CliDraft)CLI_DRAFT_DEFAULTS;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) return 1;
        if (strcmp(o, "--thinking") == 0) {
            a->thinking = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v || strncmp(o, "--", 2) != 0) {
            fprintf(stderr, "deepinfer chat: %s '%s'\n", v ? "unexpected argument" : "missing value for", o);
            return 2;
        }
        i++;
        int bad = 0;
        if (strcmp(o, "--model") == 0) a->model_dir = v;
        else if (strcmp(o, "--system") == 0) a->system = v;
        else if (strcmp(o, "--engram-map") == 0) a->engram_map = v;
        else if (!cli_sampling_flag(o, v, &a->sp, &bad) && !cli_draft_flag(o, v, &a->draft, &bad)) {
            fprintf(stderr, "deepinfer chat: unknown option '%s'\n", o);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "deepinfer chat: invalid value '%s' for %s\n", v, o);
            return 2;
        }
    }
    return 0;
}

/* The conversation: --system (if any) then the turns. */
static int reset_conversation(json_t *msgs, const char *system) {
    json_array_clear(msgs);
    if (!system) return 0;
    json_t *msg = cli_message("system", system);
    if (!msg) return -1;
    return json_array_append_new(msgs, msg) == 0 ? 0 : di_errorf("out of memory");
}

/* Steps the engine until the request finishes; SIGINT aborts it.  Returns the finish reason
 * (DI_FINISH_NONE with an error). */
static DiFinishReason run_reply(DiEngine *e, uint64_t id, DiRequestOutput *summary) {
    int active = 1;
    bool aborted = false;
    while (active) {
        if (interrupted && !aborted) {
            interrupted = 0;
            aborted = true;
            if (di_engine_abort(e, id) != 0) return DI_FINISH_NONE;
        }
        if (di_engine_step(e, &active) != 0) return DI_FINISH_NONE;
    }
    DiRequestOutput out;
    if (di_engine_get_output(e, id, &out) != 0) return DI_FINISH_NONE;
    if (out.finish_reason == DI_FINISH_ERROR) {
        di_errorf("the reply failed: %s", di_engine_request_error(e, id));
        return DI_FINISH_NONE;
    }
    *summary = out;
    return aborted ? DI_FINISH_ABORT : out.finish_reason;
}

/* One user turn: render, generate, stream, keep the reply.  -1 on an engine error. */
static int chat_turn(CliModel *m, ChatArgs *a, json_t *msgs, const char *line, int turn) {
    json_t *user = cli_message("user", line);
    if (!user) return -1;
    if (json_array_append_new(msgs, user) != 0) return di_errorf("out of memory");
    int32_t *ids = NULL;
    size_t n = 0;
    CliPrinter pr;
    uint64_t id = 0;
    int rc = -1;
    if (cli_printer_init(&pr, false, true, a->thinking) != 0) return -1;
    if (cli_render_ids(m->tok, msgs, a->thinking, &ids, &n) != 0) goto done;
    DiRequestInput in = {.prompt_ids = ids, .n_prompt_ids = (int)n};
    DiSamplingParams sp = a->sp;
    sp.seed = a->sp.seed + (uint64_t)turn;
    interrupted = 0;
    if (di_engine_add_request(m->engine, &in, &sp, cli_printer_on_delta, &pr, &id) != 0) goto done;
    DiRequestOutput out;
    DiFinishReason fr = run_reply(m->engine, id, &out);
    const char *reasoning = NULL, *content = NULL;
    if (fr == DI_FINISH_NONE || cli_printer_finish(&pr, &reasoning, &content) != 0) goto done;
    fprintf(stderr, "[prompt %d tokens; generated %d tokens; %.2f tokens/s; finish %s]\n", out.n_prompt_ids,
            out.n_tokens, out.total_time_s > 0 ? out.n_tokens / out.total_time_s : 0.0, di_finish_reason_name(fr));
    if (fr == DI_FINISH_ABORT) {
        fprintf(stderr, "[stopped]\n");
        json_array_remove(msgs, json_array_size(msgs) - 1); /* the interrupted turn is dropped */
    } else if (json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "assistant", "content", content,
                                                     "reasoning_content", reasoning)) != 0) {
        di_errorf("out of memory");
        goto done;
    }
    rc = 0;
done:
    if (id) di_engine_release(m->engine, id);
    if (rc) json_array_remove(msgs, json_array_size(msgs) - 1);
    cli_printer_free(&pr);
    free(ids);
    return rc;
}

static void strip_newline(char *s, ssize_t *len) {
    while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == '\r')) s[--*len] = 0;
}

static int chat_loop(CliModel *m, ChatArgs *a) {
    json_t *msgs = json_array();
    if (!msgs) return di_errorf("out of memory");
    if (reset_conversation(msgs, a->system) != 0) {
        json_decref(msgs);
        return -1;
    }
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    bool failed = false;
    for (int turn = 0;; turn++) {
        if (interrupted) break; /* Ctrl-C while loading or between turns: as at the prompt */
        if (tty) fputs("> ", stderr);
        errno = 0;
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) { /* EOF, or Ctrl-C at the prompt (EINTR) */
            if (tty || errno == EINTR) fputc('\n', stderr);
            break;
        }
        strip_newline(line, &len);
        if (len == 0) continue;
        if (strcmp(line, "/quit") == 0) break;
        if (strcmp(line, "/reset") == 0) {
            if ((rc = reset_conversation(msgs, a->system)) != 0) break;
            fprintf(stderr, "[conversation reset]\n");
            continue;
        }
        if (chat_turn(m, a, msgs, line, turn) != 0) { /* e.g. a prompt too long: say so, go on */
            fprintf(stderr, "deepinfer chat: %s\n", di_last_error());
            failed = true;
        }
    }
    if (rc == 0 && failed) rc = di_errorf("some turns failed (see above)");
    free(line);
    json_decref(msgs);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    ChatArgs a;
    int pr = parse_args(argc, argv, &a);
    if (pr == 1) {
        usage(stdout);
        return 0;
    }
    if (pr) {
        usage(stderr);
        return 2;
    }
    /* no SA_RESTART: Ctrl-C at the prompt interrupts getline */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    CliModel m;
    int rc = cli_model_open(&m, a.model_dir, a.engram_map, true, &a.draft);
    if (rc == 0 && !m.tok) rc = di_errorf("%s has no tokenizer.json: chat needs one", m.dir);
    if (rc == 0) rc = chat_loop(&m, &a);
    if (rc) fprintf(stderr, "deepinfer chat: %s\n", di_last_error());
    cli_model_close(&m);
    return rc ? 1 : 0;
}
