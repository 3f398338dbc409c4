/* openapi.h — the OpenAPI 3 document of the HTTP API (served at GET /openapi.json). */
#ifndef DI_SERVE_OPENAPI_H
#define DI_SERVE_OPENAPI_H

/* The document as JSON text (static storage). */
const char *di_openapi_document(void);

#endif
