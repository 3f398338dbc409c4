/* rope.c — RoPE frequency tables (rope.h, spec §4.7). */
#include "model/rope.h"

#include "base/error.h"

#include <math.h>

int rope_table_init(RopeTable *t, int dim, double theta, bool yarn, double yarn_factor,
                    double beta_fast, double beta_slow, double original_seq_len) {
    if (!t) return di_errorf("rope: no table");
    if (dim <= 0 || dim % 2 || dim > ROPE_MAX_DIM) return di_errorf("rope: rotary width %d must be even and in (0, %d]", dim, ROPE_MAX_DIM);
    if (!(theta > 1.0)) return di_errorf("rope: theta %g must be > 1", theta);
    t->dim = dim;
    int half = dim / 2;
    /* REF: 1 / base ** (arange(0, dim, 2, float32) / dim), all in float32. */
    for (int i = 0; i < half; i++) t->freq[i] = 1.0f / powf((float)theta, (float)(2 * i) / (float)dim);
    if (!yarn) return 0;
    if (!(yarn_factor > 0) || !(original_seq_len > 0) || !(beta_fast > 0) || !(beta_slow > 0))
        return di_errorf("rope: invalid YaRN parameters (factor %g, original length %g, betas %g/%g)", yarn_factor,
                         original_seq_len, beta_fast, beta_slow);
    /* corr(beta) = r * ln(L0 / (2 pi beta)) / (2 ln theta) (§4.7) */
    double corr_fast = dim * log(original_seq_len / (2 * M_PI * beta_fast)) / (2 * log(theta));
    double corr_slow = dim * log(original_seq_len / (2 * M_PI * beta_slow)) / (2 * log(theta));
    double low = floor(corr_fast), high = ceil(corr_slow);
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    float span = (float)(high - low);
    if (span < 0.001f) span = 0.001f;
    for (int i = 0; i < half; i++) {
        float ramp = ((float)i - (float)low) / span;
        ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
        float f = t->freq[i];
        t->freq[i] = f / (float)yarn_factor * ramp + f * (1.0f - ramp);
    }
    return 0;
}
