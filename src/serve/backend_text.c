/* backend_text.c — prompt ids for the server and the engine's text hooks (see backend_text.h). */
#include "serve/backend_text.h"

#include "base/error.h"
#include "base/file.h"
#include "base/mem.h"
#include "recipe/conversation.h"
#include "recipe/pretok.h"
#include "recipe/render.h"
#include "recipe/segments.h"
#include "recipe/tokenizer.h"

#include <stdlib.h>
#include <string.h>

struct DiServeText {
    DiTokenizer *tok;
    int32_t bos, eos, pad; /* -1 when the tokenizer lacks one */
};

/* The V3/V4 spellings (recipe.md §1: the tokenizer's special tokens). */
static const char BOS_TEXT[] = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
static const char EOS_TEXT[] = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
static const char PAD_TEXT[] = "<\xef\xbd\x9c\xe2\x96\x81pad\xe2\x96\x81\xef\xbd\x9c>";

DiServeText *di_serve_text_open(const char *model_dir) {
    if (!model_dir || !*model_dir) {
        di_errorf("serve text: no model directory");
        return NULL;
    }
    char *path = di_path_join(model_dir, "tokenizer.json");
    if (!path) return NULL;
    DiServeText *t = di_calloc(1, sizeof *t, "serve text");
    if (t) t->tok = di_tokenizer_load_table(path, DI_ADDED_TABLE_FILE);
    if (!t || !t->tok) {
        di_error_wrap("the model's tokenizer %s", path);
        free(path);
        free(t);
        return NULL;
    }
    free(path);
    t->bos = di_tokenizer_special_id(t->tok, BOS_TEXT);
    t->eos = di_tokenizer_special_id(t->tok, EOS_TEXT);
    t->pad = di_tokenizer_special_id(t->tok, PAD_TEXT);
    return t;
}

void di_serve_text_close(DiServeText *t) {
    if (!t) return;
    di_tokenizer_free(t->tok);
    free(t);
}

/* ---- engine hooks ------------------------------------------------------------------------ */

static int hook_encode(const void *ctx, const char *text, size_t len, int32_t **ids, size_t *n_ids) {
    const DiServeText *t = ctx;
    return di_tokenizer_encode(t->tok, text, len, ids, n_ids);
}

static const char *hook_token_bytes(const void *ctx, int32_t id, size_t *len) {
    const DiServeText *t = ctx;
    return di_tokenizer_token_bytes(t->tok, id, len);
}

/* Hidden from the text: only BOS, EOS and padding.  The other control tokens (</think>, DSML)
 * are what the output parser reads (recipe.md §3), so they stay in the text. */
static int hook_is_special(const void *ctx, int32_t id) {
    const DiServeText *t = ctx;
    return id >= 0 && (id == t->bos || id == t->eos || id == t->pad);
}

int di_serve_text_install(const DiServeText *t, DiEngine *engine) {
    if (!t || !engine) return di_errorf("serve text: NULL text or engine");
    size_t vocab = di_tokenizer_vocab_size(t->tok);
    int32_t model_vocab = di_engine_vocab_size(engine);
    if (model_vocab <= 0 || vocab > (size_t)model_vocab)
        return di_errorf("the tokenizer has %zu ids but the model's vocabulary is %d", vocab, model_vocab);
    /* BOS is added here, not by the engine: raw prompts get it in di_serve_text_encode_prompt. */
    DiTextHooks hooks = {.encode = hook_encode,
                         .token_bytes = hook_token_bytes,
                         .is_special = hook_is_special,
                         .render_chat = NULL,
                         .ctx = t,
                         .bos_id = -1};
    return di_engine_set_text_hooks(engine, &hooks);
}

/* ---- prompts ----------------------------------------------------------------------------- */

int di_serve_text_render(const DiServeText *t, const json_t *conversation, int32_t **ids, size_t *n_ids) {
    if (!t || !conversation || !ids || !n_ids) return di_errorf("serve text: bad render arguments");
    *ids = NULL;
    *n_ids = 0;
    DiConversation conv;
    if (di_conversation_from_json(conversation, &conv) != 0) return di_error_wrap("rendering the conversation");
    DiSegmentList segs;
    di_segments_init(&segs);
    int rc = di_render_conversation(&conv, &segs);
    di_conversation_free(&conv);
    if (rc == 0 && di_tokenizer_encode_segments(t->tok, &segs, ids, n_ids) != 0)
        rc = di_error_wrap("encoding the rendered prompt with the model's tokenizer");
    else if (rc != 0)
        di_error_wrap("rendering the conversation");
    di_segments_free(&segs);
    return rc;
}

int di_serve_text_encode_prompt(const DiServeText *t, const char *prompt, int32_t **ids, size_t *n_ids) {
    return di_serve_text_encode(t, prompt, true, ids, n_ids);
}

int di_serve_text_encode(const DiServeText *t, const char *prompt, bool add_special, int32_t **ids, size_t *n_ids) {
    if (!t || !prompt || !ids || !n_ids) return di_errorf("serve text: bad prompt arguments");
    *ids = NULL;
    *n_ids = 0;
    int32_t *text_ids = NULL;
    size_t n = 0;
    if (di_tokenizer_encode(t->tok, prompt, strlen(prompt), &text_ids, &n) != 0)
        return di_error_wrap("tokenizing the prompt");
    size_t bos = add_special && t->bos >= 0;
    int32_t *all = di_malloc((n + bos + 1) * sizeof *all, "prompt ids");
    if (!all) {
        free(text_ids);
        return -1;
    }
    if (bos) all[0] = t->bos;
    if (n) memcpy(all + bos, text_ids, n * sizeof *all);
    free(text_ids);
    *ids = all;
    *n_ids = n + bos;
    return 0;
}

/* ---- tokens ------------------------------------------------------------------------------ */

const char *di_serve_text_token_bytes(const DiServeText *t, int32_t id, size_t *len) {
    if (!t || !len) {
        di_errorf("serve text: bad token arguments");
        return NULL;
    }
    return di_tokenizer_token_bytes(t->tok, id, len);
}

int32_t di_serve_text_think_end(const DiServeText *t) {
    return t ? di_tokenizer_special_id(t->tok, "</think>") : -1;
}

/* ---- ids -> text ------------------------------------------------------------------------- */

/* Append bytes[0..len) to out, each maximal invalid UTF-8 subpart as U+FFFD. */
static size_t append_lossy(char *out, const uint8_t *bytes, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = di_utf8_seq_len(bytes + i, len - i);
        if (n) {
            memcpy(out + o, bytes + i, n);
            o += n;
            i += n;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += di_utf8_invalid_len(bytes + i, len - i);
        }
    }
    return o;
}

int di_serve_text_decode(const DiServeText *t, const int32_t *ids, size_t n_ids, char **text) {
    if (!t || (!ids && n_ids) || !text) return di_errorf("serve text: bad decode arguments");
    *text = NULL;
    size_t total = 0, len;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || !di_tokenizer_token_bytes(t->tok, ids[i], &len))
            return di_errorf("token id %d (at %zu) is not in the vocabulary (0..%zu)", (int)ids[i], i,
                             di_tokenizer_vocab_size(t->tok) - 1);
        total += len;
    }
    uint8_t *bytes = di_malloc(total + 1, "decoded bytes");
    char *out = bytes ? di_malloc(3 * total + 1, "decoded text") : NULL; /* U+FFFD per byte at most */
    if (!out) {
        free(bytes);
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const char *b = di_tokenizer_token_bytes(t->tok, ids[i], &len);
        memcpy(bytes + o, b, len);
        o += len;
    }
    out[append_lossy(out, bytes, total)] = '\0';
    free(bytes);
    *text = out;
    return 0;
}
