/*
 * json_escape.c: a run's output as the text of a JSON string, written
 * straight into a buffer.  jansson's dump formats each control character
 * with snprintf: a run printing NULs or escapes cost sbxd ~150 ns a byte
 * (6 MB/s a core), and one detached `cat /dev/zero` kept its loop busy.
 * This is one table lookup a byte, and writes what jansson would: the
 * short escapes, \u00XX (upper case) for the other controls, '"' and '\'
 * escaped, everything else (UTF-8 included) as it is.
 */
#include <stdint.h>
#include <string.h>

#include "json_escape.h"

/* 0: as it is; 'u': \u00XX; else the letter after the backslash. */
static const char esc[128] = {
	['\b'] = 'b',  ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r', ['"'] = '"',
	['\\'] = '\\', [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u', [0x04] = 'u',
	[0x05] = 'u',  [0x06] = 'u', [0x07] = 'u', [0x0b] = 'u', [0x0e] = 'u', [0x0f] = 'u',
	[0x10] = 'u',  [0x11] = 'u', [0x12] = 'u', [0x13] = 'u', [0x14] = 'u', [0x15] = 'u',
	[0x16] = 'u',  [0x17] = 'u', [0x18] = 'u', [0x19] = 'u', [0x1a] = 'u', [0x1b] = 'u',
	[0x1c] = 'u',  [0x1d] = 'u', [0x1e] = 'u', [0x1f] = 'u',
};

/* The length of the UTF-8 sequence at s (n bytes left), or 0 when it is
 * not one (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF),
 * as jansson refuses it. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	uint32_t cp;

	if (c < 0xc2 || c > 0xf4)
		return 0;
	if (c < 0xe0) {
		len = 2;
		cp = c & 0x1f;
	} else if (c < 0xf0) {
		len = 3;
		cp = c & 0x0f;
	} else {
		len = 4;
		cp = c & 0x07;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

size_t sbx_json_escape(char *out, const char *text, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *s = (const unsigned char *)text;
	char *p = out;

	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		if (c >= 0x80) {
			size_t k = utf8_len(s + i, n - i);
			if (k == 0)
				return SBX_JSON_NOT_UTF8;
			memcpy(p, s + i, k);
			p += k;
			i += k;
			continue;
		}
		char e = esc[c];
		if (!e) {
			*p++ = (char)c;
		} else if (e != 'u') {
			*p++ = '\\';
			*p++ = e;
		} else {
			memcpy(p, "\\u00", 4);
			p[4] = hex[c >> 4];
			p[5] = hex[c & 15];
			p += 6;
		}
		i++;
	}
	return (size_t)(p - out);
}
