/* test_rope.c — RoPE tables and rotation (§4.7) against the frequency tables printed in the spec
 * (r = 64 release tables; r = 16 tiny tables of §9.3) and hand-derived rotations. */
#include "test.h"

#include "kernels/backend.h"
#include "model/rope.h"

#include <math.h>

static void check_table(const RopeTable *t, const double *want, int n) {
    for (int i = 0; i < n; i++) CHECK_MSG(fabs(t->freq[i] - want[i]) <= 2e-7 * want[i] + 1e-12, "f'[%d] = %.9g, spec %.9g", i, t->freq[i], want[i]);
}

TEST(release_main_table) {
    const double want[32] = {1, 0.749894202, 0.562341332, 0.421696514, 0.316227764, 0.237137362, 0.177827939, 0.133352146,
                             0.100000001, 0.0749894157, 0.0562341288, 0.0421696492, 0.0316227786, 0.0237137359, 0.0177827943,
                             0.0133352149, 0.00999999978, 0.00749894232, 0.00562341325, 0.00421696482, 0.00316227786,
                             0.00237137382, 0.00177827943, 0.00133352145, 0.00100000005, 0.000749894185, 0.000562341302,
                             0.000421696488, 0.000316227786, 0.000237137385, 0.00017782794, 0.00013335215};
    RopeTable t;
    CHECK(rope_table_init(&t, 64, 10000, false, 0, 0, 0, 0) == 0);
    check_table(&t, want, 32);
}

TEST(release_compress_table_with_yarn) {
    const double want[32] = {1, 0.687656045, 0.472870797, 0.325172454, 0.223606795, 0.153764561, 0.10573712, 0.0727107748,
                             0.0500000007, 0.0343828015, 0.0236435402, 0.0162586235, 0.0111803403, 0.00768822804, 0.00528685655,
                             0.00363553851, 0.00226562493, 0.00139680132, 0.000849689706, 0.000508081983, 0.000296977785,
                             0.000168179977, 9.08678412e-05, 4.54442306e-05, 1.95312532e-05, 5.37231244e-06, 3.69430336e-06,
                             2.5404097e-06, 1.74692821e-06, 1.20128561e-06, 8.260713e-07, 5.6805294e-07};
    RopeTable t;
    CHECK(rope_table_init(&t, 64, 160000, true, 16, 32, 1, 65536) == 0);
    check_table(&t, want, 32);
}

TEST(tiny_tables) {
    const double main16[8] = {1, 0.316227764, 0.100000001, 0.0316227786, 0.00999999978, 0.00316227786, 0.00100000005, 0.000316227786};
    const double comp16[8] = {1, 0.223606795, 0.0500000007, 0.0111803403, 0.00191406242, 0.000296977785, 3.71093774e-05, 1.74692821e-06};
    RopeTable a, b;
    CHECK(rope_table_init(&a, 16, 10000, false, 0, 0, 0, 0) == 0);
    CHECK(rope_table_init(&b, 16, 160000, true, 16, 32, 1, 65536) == 0);
    check_table(&a, main16, 8);
    check_table(&b, comp16, 8);
}

TEST(rotation_pairs_adjacent_tail_and_inverts) {
    RopeTable t;
    CHECK(rope_table_init(&t, 4, 10000, false, 0, 0, 0, 0) == 0);
    /* n = 6, rotary tail = dims 2..5, pairs (2,3) with f0 = 1 and (4,5) with f1 = 0.01 */
    float x[6] = {7, 8, 1, 0, 0, 1};
    const DiKernelBackend *be = di_backend_cpu_ref();
    be->rope(t.freq, t.dim, x, 6, 3, false);
    CHECK(x[0] == 7 && x[1] == 8); /* the non-rotary head is untouched */
    CHECK_NEAR(x[2], cos(3.0), 1e-6);
    CHECK_NEAR(x[3], sin(3.0), 1e-6);
    CHECK_NEAR(x[4], -sin(0.03), 1e-6);
    CHECK_NEAR(x[5], cos(0.03), 1e-6);
    be->rope(t.freq, t.dim, x, 6, 3, true);
    CHECK_NEAR(x[2], 1, 1e-6);
    CHECK_NEAR(x[3], 0, 1e-6);
    CHECK_NEAR(x[4], 0, 1e-6);
    CHECK_NEAR(x[5], 1, 1e-6);
}

TEST(bad_tables_are_rejected) {
    RopeTable t;
    CHECK(rope_table_init(&t, 3, 10000, false, 0, 0, 0, 0) == -1);
    CHECK(rope_table_init(&t, 0, 10000, false, 0, 0, 0, 0) == -1);
    CHECK(rope_table_init(&t, 16, 0.5, false, 0, 0, 0, 0) == -1);
    CHECK(rope_table_init(&t, 16, 10000, true, 0, 32, 1, 65536) == -1);
    CHECK(rope_table_init(NULL, 16, 10000, false, 0, 0, 0, 0) == -1);
}

int main(void) {
    RUN_TEST(release_main_table);
    RUN_TEST(release_compress_table_with_yarn);
    RUN_TEST(tiny_tables);
    RUN_TEST(rotation_pairs_adjacent_tail_and_inverts);
    RUN_TEST(bad_tables_are_rejected);
    return TEST_SUMMARY();
}
