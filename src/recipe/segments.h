/* segments.h — the hand-off between prompt rendering and the tokenizer (recipe.md §5.2–5.3).
 *
 * A rendered prompt is an ordered list of segments, never one string: SPECIAL segments are the
 * control tokens the *template* writes (BOS, <｜User｜>, </think>, ｜DSML｜ markers, ...) and map
 * to exactly one added-token id; TEXT segments are everything else (template text and all
 * client strings) and are encoded as plain byte-level BPE with no added-token recognition.
 * Adjacent TEXT segments are merged before encoding, so client text cannot change how the
 * template is tokenized and cannot forge a control token (the one exception: the grounding
 * markers in assistant content and reasoning, render.c, di_segments_marker).  The prompt string shown to users is
 * the concatenation of the segments' bytes. */
#ifndef DI_RECIPE_SEGMENTS_H
#define DI_RECIPE_SEGMENTS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { DI_SEGMENT_TEXT = 0, DI_SEGMENT_SPECIAL = 1 } DiSegmentKind;

typedef struct {
    DiSegmentKind kind;
    size_t offset; /* into DiSegmentList.bytes */
    size_t len;    /* bytes; for SPECIAL the token's exact spelling, e.g. "<｜User｜>" */
    bool text_fallback; /* SPECIAL: encoded as text when the tokenizer lacks the token */
} DiSegment;

typedef struct {
    char *bytes; /* all segment bytes back to back (NUL-terminated), = the prompt string */
    size_t n_bytes, cap_bytes;
    DiSegment *segs;
    size_t n_segs, cap_segs;
} DiSegmentList;

void di_segments_init(DiSegmentList *list);
void di_segments_free(DiSegmentList *list);
void di_segments_clear(DiSegmentList *list);
/* Append text; merges into the previous segment when that is TEXT. */
int di_segments_text(DiSegmentList *list, const char *text, size_t len);
/* Append one control token by its spelling (never merged). */
int di_segments_special(DiSegmentList *list, const char *spelling);
/* Append a control token the model writes inside its own text (the grounding markers): its id
 * when the tokenizer has it, else plain text joined with the text around it (a tokenizer
 * without it, like the built-in tiny model's, still encodes the prompt). */
int di_segments_marker(DiSegmentList *list, const char *spelling);

#endif
