/* log.c — leveled logging (see log.h). */
#include "base/log.h"

#include "base/env.h"
#include "base/error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int current_level = -1;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;

int di_log_parse_level(const char *name, DiLogLevel *out) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, names[i]) == 0) {
            *out = (DiLogLevel)i;
            return 0;
        }
    return di_errorf("unknown log level '%s' (expected error, warn, info or debug)", name ? name : "");
}

static void init_level(void) {
    DiLogLevel level = DI_LOG_INFO;
    if (di_env_log_level(&level) != 0)
        fprintf(stderr, "deepinfer: DEEPINFER_LOG_LEVEL: %s; using info\n", di_error_message());
    if (current_level < 0) current_level = (int)level;
}

bool di_log_enabled(DiLogLevel level) {
    pthread_once(&level_once, init_level);
    return (int)level <= current_level;
}

void di_log_set_level(DiLogLevel level) {
    pthread_once(&level_once, init_level);
    current_level = (int)level;
}

void di_log(DiLogLevel level, const char *fmt, ...) {
    if (!di_log_enabled(level)) return;
    static const char *tags[] = {"error", "warn", "info", "debug"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "deepinfer %s: %s\n", tags[level], line);
}
