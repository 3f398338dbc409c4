/* render.h — prompt rendering for the V4 (April), V4-0731 and V4.1 encodings (recipe.md §2).
 *
 * The output is a DiSegmentList: SPECIAL segments for the control tokens the template writes,
 * TEXT for template text and every client string (§5.2), so client text can never become a
 * control token.  Behaviour follows the official deepseek-recipe 0.2.0 renderers
 * (DeepseekV4Encoding = V4-0731, DeepseekV41Encoding) wherever they are defined; the V4 April
 * effort table, the developer role, quick-task tokens and drop_thinking=false are not in that
 * package and follow recipe.md §2.2-§2.4. */
#ifndef DI_RECIPE_RENDER_H
#define DI_RECIPE_RENDER_H

#include "recipe/conversation.h"
#include "recipe/segments.h"

/* Spellings of the control tokens the templates write (§1.1 table). */
#define DI_SPELL_BOS "<｜begin▁of▁sentence｜>"
#define DI_SPELL_EOS "<｜end▁of▁sentence｜>"
#define DI_SPELL_USER "<｜User｜>"
#define DI_SPELL_ASSISTANT "<｜Assistant｜>"
#define DI_SPELL_SYSTEM "<｜System｜>"
#define DI_SPELL_THINK "<think>"
#define DI_SPELL_END_THINK "</think>"
#define DI_SPELL_LATEST_REMINDER "<｜latest_reminder｜>"

/* Render `conv` into `out` (cleared first).  The prompt string is out->bytes. */
int di_render_conversation(const DiConversation *conv, DiSegmentList *out);

/* The effort prefix text for the first message ("" when none), §2.4; V4.1 numeric text is
 * written into buf (at least 128 bytes). */
const char *di_render_effort_text(const DiConversation *conv, char *buf, size_t buf_size);

#endif
