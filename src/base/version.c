/* version.c — the library's identity and the public face of the error buffer. */
#include "deepinfer.h"

#include "base/error.h"

const char *di_last_error(void) { return di_error_message(); }

const char *di_version(void) { return DEEPINFER_VERSION; }
