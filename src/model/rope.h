/* rope.h — rotary position embedding of V4.1 (§4.7): two frequency tables ("main": rope_theta,
 * no YaRN, for ratio-0 layers and DSpark stages; "compress": compress_rope_theta + YaRN for every
 * ratio > 0 layer).  The rotation of the LAST r dims of a vector as adjacent pairs, and its
 * inverse (used on the attention output before wo_a), runs on the backend (kernels/backend.h). */
#ifndef DI_MODEL_ROPE_H
#define DI_MODEL_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#define ROPE_MAX_DIM 512

typedef struct {
    int dim;                       /* r: rotated width (even) */
    float freq[ROPE_MAX_DIM / 2];  /* f'_i, i < r/2 */
} RopeTable;

/* f_i = 1 / theta^(2i/r) in fp32; with yarn_factor > 0 the YaRN ramp of §4.7 between
 * low = max(floor(corr(beta_fast)), 0) and high = min(ceil(corr(beta_slow)), r-1). */
int rope_table_init(RopeTable *t, int dim, double theta, bool yarn, double yarn_factor,
                    double beta_fast, double beta_slow, double original_seq_len);

/* The rotation itself is a backend op (kernels/backend.h, rope; model_rope_apply). */

#endif
