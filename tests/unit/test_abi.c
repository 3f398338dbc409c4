/* test_abi.c — di_abi_struct / di_abi_field, the layout table the Python binding checks its
 * ctypes mirrors against: the tables cover every field of each struct (a field added to a
 * struct but not to its table leaves a gap), agree with hand-derived x86-64 (LP64) layouts, and
 * refuse bad arguments with an error naming them. */
#include "test.h"

#include "deepinfer.h"

static const char *const TYPES[] = {"DiEngineOptions", "DiLogitBias", "DiSamplingParams", "DiRequestInput", "DiTokenLogprobs",
                                    "DiStreamDelta",   "DiRequestOutput",  "DiEngineMetrics", "DiTextHooks"};

/* Fields in order, no overlap, and no gap (between fields or at the end) of 8 bytes or more, or
 * as large as the next field: such a gap is a field the table misses, not padding. */
TEST(tables_cover_every_struct) {
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        size_t size = 0, end = 0;
        int n = 0;
        CHECK(di_abi_struct(TYPES[t], &size, &n) == 0);
        CHECK_MSG(n > 0 && size > 0, "%s: %d fields, %zu bytes", TYPES[t], n, size);
        for (int i = 0; i < n; i++) {
            const char *name = NULL;
            size_t off = 0, fsize = 0;
            CHECK(di_abi_field(TYPES[t], i, &name, &off, &fsize) == 0);
            CHECK_MSG(off >= end, "%s.%s at %zu overlaps the field before (ends at %zu)", TYPES[t], name, off, end);
            size_t gap = off - end, limit = fsize < 8 ? fsize : 8;
            CHECK_MSG(gap < limit, "%s: %zu bytes before %s that no field covers", TYPES[t], gap, name);
            end = off + fsize;
        }
        CHECK_MSG(end <= size && size - end < 8, "%s: fields end at %zu of %zu bytes", TYPES[t], end, size);
    }
}

static void expect_field(const char *type, int index, const char *name, size_t offset, size_t size) {
    const char *n = NULL;
    size_t o = 0, s = 0;
    CHECK(di_abi_field(type, index, &n, &o, &s) == 0);
    CHECK_STR(n, name);
    CHECK_EQ_INT(o, offset);
    CHECK_EQ_INT(s, size);
}

/* LP64 by hand: pointers and size_t 8 bytes, int and float 4, each aligned to its size. */
TEST(layouts_match_hand_derived_lp64) {
    size_t size;
    int n;
    CHECK(di_abi_struct("DiRequestInput", &size, &n) == 0);
    CHECK_EQ_INT(size, 48); /* ptr 0, int 8 (+4 padding), ptr 16, ptr 24, ptr 32, int 40 (+4 padding) */
    CHECK_EQ_INT(n, 6);
    expect_field("DiRequestInput", 2, "prompt_text", 16, 8);
    expect_field("DiRequestInput", 4, "cache_salt", 32, 8);
    expect_field("DiRequestInput", 5, "exact_state", 40, 4);
    CHECK(di_abi_struct("DiTokenLogprobs", &size, &n) == 0);
    CHECK_EQ_INT(size, 172); /* 3 x 4 bytes, then 20 int32 and 20 float */
    expect_field("DiTokenLogprobs", 3, "top_ids", 12, 80);
    expect_field("DiTokenLogprobs", 4, "top_logprobs", 92, 80);
    CHECK(di_abi_struct("DiTextHooks", &size, &n) == 0);
    CHECK_EQ_INT(size, 48); /* 5 pointers, int32 at 40, padded to 8 */
    expect_field("DiTextHooks", 5, "bos_id", 40, 4);
    expect_field("DiEngineOptions", 0, "max_num_seqs", 0, 4);
    expect_field("DiEngineOptions", 3, "state_memory_bytes", 16, 8); /* 3 ints, then 4 bytes of padding */
}

TEST(bad_arguments_are_refused_by_name) {
    size_t size, off;
    int n;
    const char *name;
    CHECK(di_abi_struct("DiModel", &size, &n) == -1);
    CHECK(strstr(di_last_error(), "'DiModel'") != NULL);
    CHECK(di_abi_struct(NULL, &size, &n) == -1);
    CHECK(strstr(di_last_error(), "type is NULL") != NULL);
    CHECK(di_abi_struct("DiRequestInput", NULL, &n) == -1);
    CHECK(di_abi_field("DiRequestInput", 6, &name, &off, &size) == -1);
    CHECK(strstr(di_last_error(), "index 6 is out of range") != NULL);
    CHECK(di_abi_field("DiRequestInput", -1, &name, &off, &size) == -1);
    CHECK(di_abi_field("DiRequestInput", 0, NULL, &off, &size) == -1);
    CHECK(strstr(di_last_error(), "must not be NULL") != NULL);
}

int main(void) {
    RUN_TEST(tables_cover_every_struct);
    RUN_TEST(layouts_match_hand_derived_lp64);
    RUN_TEST(bad_arguments_are_refused_by_name);
    return TEST_SUMMARY();
}
