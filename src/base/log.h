/* log.h — leveled logging to stderr.  The level comes from DEEPINFER_LOG_LEVEL
 * (error | warn | info | debug; default info).  Progress lines for long work (loading a
 * checkpoint, writing one) go through di_progress so they can be silenced in one place. */
#ifndef DI_BASE_LOG_H
#define DI_BASE_LOG_H

#include <stdbool.h>

typedef enum { DI_LOG_ERROR = 0, DI_LOG_WARN = 1, DI_LOG_INFO = 2, DI_LOG_DEBUG = 3 } DiLogLevel;

void di_log(DiLogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool di_log_enabled(DiLogLevel level);
void di_log_set_level(DiLogLevel level);
/* Parse a level name; -1 (with error) when it is not one of the four names. */
int di_log_parse_level(const char *name, DiLogLevel *out);

#define DI_ERROR(...) di_log(DI_LOG_ERROR, __VA_ARGS__)
#define DI_WARN(...) di_log(DI_LOG_WARN, __VA_ARGS__)
#define DI_INFO(...) di_log(DI_LOG_INFO, __VA_ARGS__)
#define DI_DEBUG(...) di_log(DI_LOG_DEBUG, __VA_ARGS__)

#endif
