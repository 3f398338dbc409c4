/* error.h — the error convention of deepinfer.
 *
 * Every fallible function returns 0 (or a valid pointer) on success and -1 (or NULL) on
 * failure, after recording a human-readable message that names the cause in a thread-local
 * buffer.  Callers that add context wrap the message ("loading model-00001.safetensors: ...")
 * with di_error_wrap(), so the user sees the whole chain.  This is the dlerror()/sqlite3_errmsg()
 * pattern: no error object threads through every signature, and a message is never lost. */
#ifndef DI_BASE_ERROR_H
#define DI_BASE_ERROR_H

#include <stddef.h>

#define DI_ERROR_MAX 1024

/* Record a formatted message as the current thread's error; always returns -1. */
int di_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prefix the current error with formatted context: "<context>: <previous message>". Returns -1. */
int di_error_wrap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The current thread's last error message ("" when none). */
const char *di_error_message(void);

void di_error_clear(void);

#endif
