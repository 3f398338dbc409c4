/* cpu_check.h — the CPU features the build's baseline needs (cpu_check.c). */
#ifndef DI_CPU_CHECK_H
#define DI_CPU_CHECK_H

#include <stdbool.h>

/* The x86-64-v3 features this CPU lacks, comma-separated; "" when it has them all (and on
 * architectures other than x86-64).  Points into a static buffer. */
const char *di_cpu_missing_features(void);

#endif
