/* test_engine_text.c — incremental UTF-8 decoding and stop strings, against hand-derived cases
 * of Python's bytes.decode("utf-8", "replace") (one U+FFFD per maximal invalid subpart). */
#include "test.h"

#include "engine/textstream.h"

#define FFFD "\xEF\xBF\xBD"

/* Decode `bytes` fed in pieces of `piece` bytes, then flush. */
static void decode(const char *bytes, size_t len, size_t piece, char *out, size_t cap) {
    DiTextStream ts;
    di_text_stream_init(&ts);
    for (size_t i = 0; i < len; i += piece) di_text_stream_append(&ts, bytes + i, len - i < piece ? len - i : piece);
    di_text_stream_flush(&ts);
    snprintf(out, cap, "%s", ts.text ? ts.text : "");
    di_text_stream_free(&ts);
}

TEST(valid_utf8_passes_through_in_any_split) {
    const char *s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80z"; /* a é 中 😀 z */
    char out[64];
    for (size_t piece = 1; piece <= 4; piece++) {
        decode(s, strlen(s), piece, out, sizeof out);
        CHECK_STR(out, s);
    }
}

/* Python: b"\xe4\xb8a".decode("utf-8", "replace") == "\ufffda";
 * b"\xff" -> "\ufffd"; b"\xed\xa0\x80" (a surrogate) -> three U+FFFD;
 * b"\xf0\x9f\x98" at the end -> one U+FFFD; b"\xc0\xaf" (overlong) -> two U+FFFD. */
TEST(invalid_bytes_become_replacement_characters_like_python) {
    char out[64];
    decode("\xE4\xB8" "a", 3, 1, out, sizeof out);
    CHECK_STR(out, FFFD "a");
    decode("\xFF", 1, 1, out, sizeof out);
    CHECK_STR(out, FFFD);
    decode("\xED\xA0\x80", 3, 1, out, sizeof out);
    CHECK_STR(out, FFFD FFFD FFFD);
    decode("\xF0\x9F\x98", 3, 2, out, sizeof out);
    CHECK_STR(out, FFFD);
    decode("\xC0\xAF", 2, 1, out, sizeof out);
    CHECK_STR(out, FFFD FFFD);
    decode("\xE0\x80\x80", 3, 3, out, sizeof out);
    CHECK_STR(out, FFFD FFFD FFFD);
}

TEST(incomplete_tail_is_not_ready_until_complete) {
    DiTextStream ts;
    di_text_stream_init(&ts);
    di_text_stream_append(&ts, "ab\xE4\xB8", 4);
    CHECK_EQ_INT(ts.len, 2);
    CHECK_EQ_INT(di_text_stream_ready(&ts, 0, false), 2);
    di_text_stream_append(&ts, "\xAD", 1);
    CHECK_EQ_INT(ts.len, 5);
    di_text_stream_free(&ts);
}

TEST(stop_strings_cut_the_text_and_hold_back_a_possible_start) {
    DiTextStream ts;
    di_text_stream_init(&ts);
    const char *stops[2] = {"STOP", "xy"};
    di_text_stream_append(&ts, "hello ST", 8);
    CHECK_EQ_INT(di_text_stream_find_stop(&ts, stops, 2, 0), -1);
    /* hold back longest - 1 = 3 bytes: "hello" is ready, " ST" might start "STOP" */
    CHECK_EQ_INT(di_text_stream_ready(&ts, 3, false), 5);
    ts.delivered = 5;
    di_text_stream_append(&ts, "OP and xy", 9);
    CHECK_EQ_INT(di_text_stream_find_stop(&ts, stops, 2, 5), 0);
    CHECK_STR(ts.text, "hello ");
    CHECK_EQ_INT(di_text_stream_ready(&ts, 3, true), 6);
    di_text_stream_free(&ts);
}

TEST(hold_back_never_splits_a_character) {
    DiTextStream ts;
    di_text_stream_init(&ts);
    di_text_stream_append(&ts, "a\xE4\xB8\xAD" "b", 5);
    /* hold 1 byte: "a中" ready (4 bytes); hold 2: the cut would fall inside 中, back to 1 */
    CHECK_EQ_INT(di_text_stream_ready(&ts, 1, false), 4);
    CHECK_EQ_INT(di_text_stream_ready(&ts, 2, false), 1);
    di_text_stream_free(&ts);
}

TEST(earliest_stop_match_wins) {
    DiTextStream ts;
    di_text_stream_init(&ts);
    const char *stops[2] = {"cd", "bc"};
    di_text_stream_append(&ts, "abcdef", 6);
    CHECK_EQ_INT(di_text_stream_find_stop(&ts, stops, 2, 0), 1);
    CHECK_STR(ts.text, "a");
    di_text_stream_free(&ts);
}

int main(void) {
    RUN_TEST(valid_utf8_passes_through_in_any_split);
    RUN_TEST(invalid_bytes_become_replacement_characters_like_python);
    RUN_TEST(incomplete_tail_is_not_ready_until_complete);
    RUN_TEST(stop_strings_cut_the_text_and_hold_back_a_possible_start);
    RUN_TEST(hold_back_never_splits_a_character);
    RUN_TEST(earliest_stop_match_wins);
    return TEST_SUMMARY();
}
