/* attn_avx512.c — the indexer scores on AVX-512 (F), bit for bit the reference's (and so the
 * AVX2 kernel's) results: sixteen keys a vector, each lane one key's chains in the reference's
 * order (attn_index_body.h).  The score is the context-long loop of the indexer (every visible
 * entry for every row), so it is the one that earns a zmm version: half the multiply and add
 * instructions of the AVX2 kernel for the same work.  The top-k scan and the heads use the AVX2
 * kernels.  Compiled for AVX-512 by the pragma whatever -march says, and chosen only where
 * cpuid reports it (backend_cpu.c). */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl")
#endif

#include "kernels/cpu/attn_simd.h"
#include "kernels/cpu/attn_lanes.h"

#include <immintrin.h>
#include <string.h>

#define DI_ATTN_VW 16
#define DI_ATTN_INDEX_FN di_attn_index_scores_avx512
#include "kernels/cpu/attn_index_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
