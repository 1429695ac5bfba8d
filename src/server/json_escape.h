/*
 * json_escape.h: text as the inside of a JSON string (json_escape.c).
 */
#ifndef SBX_JSON_ESCAPE_H
#define SBX_JSON_ESCAPE_H

#include <stddef.h>

#define SBX_JSON_NOT_UTF8 ((size_t)-1)
/* At most this many bytes out per byte in. */
#define SBX_JSON_ESCAPE_MAX 6

/* Write text (n bytes) escaped into out, which has room for
 * SBX_JSON_ESCAPE_MAX * n bytes, as jansson's dump would (no quotes
 * around it): the bytes written, or SBX_JSON_NOT_UTF8 when text is not
 * UTF-8 (out then holds garbage). */
size_t sbx_json_escape(char *out, const char *text, size_t n);

#endif
