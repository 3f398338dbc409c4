/* error.c — thread-local error message buffer (see error.h for the convention). */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_text[DI_ERROR_MAX];

int di_errorf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return -1;
}

int di_error_wrap(const char *fmt, ...) {
    char previous[DI_ERROR_MAX];
    char context[DI_ERROR_MAX];
    memcpy(previous, error_text, sizeof previous);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    /* "<context>: <previous>", truncated to the buffer */
    size_t len = strnlen(context, sizeof context - 1);
    memcpy(error_text, context, len);
    if (previous[0] && len + 2 < sizeof error_text) {
        memcpy(error_text + len, ": ", 2);
        len += 2;
        size_t rest = strnlen(previous, sizeof previous - 1);
        if (rest > sizeof error_text - 1 - len) rest = sizeof error_text - 1 - len;
        memcpy(error_text + len, previous, rest);
        len += rest;
    }
    error_text[len] = '\0';
    return -1;
}

const char *di_error_message(void) { return error_text; }

void di_error_clear(void) { error_text[0] = '\0'; }
