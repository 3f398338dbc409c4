/* env.h — the DEEPINFER_* environment variables, checked in one place.
 *
 * architecture.md fixes the names users know; a bad value must be an error, never silently
 * ignored.  Some variables name features this build does not have yet (the CUDA backend, DSpark
 * speculative decoding, bounded-replay prefill truncation): their "off" values are accepted and
 * anything that would turn them on is refused with the reason, so nobody believes they are on. */
#ifndef DI_BASE_ENV_H
#define DI_BASE_ENV_H

/* Checks every DEEPINFER_* variable that is set; -1 with an error naming the first bad one. */
int di_env_check(void);

#endif
