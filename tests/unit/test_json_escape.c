/*
 * test_json_escape.c: sbxd's JSON text escaper (src/server/json_escape.c)
 * writes what jansson's dump writes for the same text, and refuses what
 * jansson refuses (not UTF-8), since clients of the JSON event stream were
 * built against jansson's output:
 *
 *   - every single byte, alone and between ASCII;
 *   - the edges of UTF-8: the largest and smallest of each length, overlong
 *     forms, surrogates, past U+10FFFF, cut-off sequences, stray
 *     continuation bytes;
 *   - 20,000 random strings, half of them made of valid code points (so
 *     that most are UTF-8: the control is that both answers occur).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "json_escape.h"

/* jansson's answer: the escaped text between the quotes, or NULL. */
static char *jansson_text(const char *s, size_t n, size_t *len)
{
	json_t *j = json_stringn(s, n);
	if (!j)
		return NULL;
	char *d = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
	json_decref(j);
	assert_non_null(d);
	size_t dl = strlen(d);
	assert_true(dl >= 2 && d[0] == '"' && d[dl - 1] == '"');
	memmove(d, d + 1, dl - 2);
	*len = dl - 2;
	return d;
}

static int n_valid, n_invalid;

static void same(const char *s, size_t n)
{
	char *out = malloc(SBX_JSON_ESCAPE_MAX * n + 1);
	assert_non_null(out);
	size_t got = sbx_json_escape(out, s, n), want_len = 0;
	char *want = jansson_text(s, n, &want_len);
	if (!want) {
		n_invalid++;
		assert_true(got == SBX_JSON_NOT_UTF8);
	} else {
		n_valid++;
		assert_true(got != SBX_JSON_NOT_UTF8);
		assert_int_equal(got, want_len);
		assert_memory_equal(out, want, want_len);
	}
	free(want);
	free(out);
}

static void test_every_byte(void **state)
{
	(void)state;
	for (int c = 0; c < 256; c++) {
		char one = (char)c, three[3] = {'a', (char)c, 'z'};
		same(&one, 1);
		same(three, 3);
	}
}

static void test_utf8_edges(void **state)
{
	(void)state;
	static const char *const cases[] = {
		"\xc2\x80",
		"\xdf\xbf", /* 2 bytes: first, last */
		"\xe0\xa0\x80",
		"\xef\xbf\xbf", /* 3 bytes */
		"\xf0\x90\x80\x80",
		"\xf4\x8f\xbf\xbf", /* 4 bytes, U+10FFFF */
		"\xc0\x80",
		"\xc1\xbf", /* overlong 2 */
		"\xe0\x80\x80",
		"\xe0\x9f\xbf", /* overlong 3 */
		"\xf0\x80\x80\x80",
		"\xf0\x8f\xbf\xbf", /* overlong 4 */
		"\xed\xa0\x80",
		"\xed\xbf\xbf", /* surrogates */
		"\xed\x9f\xbf",
		"\xee\x80\x80", /* around them */
		"\xf4\x90\x80\x80",
		"\xf5\x80\x80\x80",	/* past U+10FFFF */
		"\xf8\x88\x80\x80\x80", /* 5 bytes */
		"\xe2\x82",
		"\xf0\x9f\x98", /* cut off */
		"\x80",
		"\xbf", /* stray continuation */
		"\xe2\x28\xa1",
		"\xc3\x28", /* bad continuation */
		"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \"\\/\x7f",
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		same(cases[i], strlen(cases[i]));
	same("a\0b", 3); /* NUL inside */
}

/* A random code point's UTF-8 (surrogates skipped). */
static size_t put_cp(char *p)
{
	uint32_t cp;
	switch (rand() % 4) {
	case 0:
		cp = (uint32_t)rand() % 0x80;
		break;
	case 1:
		cp = 0x80 + (uint32_t)rand() % (0x800 - 0x80);
		break;
	case 2:
		do
			cp = 0x800 + (uint32_t)rand() % (0x10000 - 0x800);
		while (cp >= 0xd800 && cp <= 0xdfff);
		break;
	default:
		cp = 0x10000 + (uint32_t)rand() % (0x110000 - 0x10000);
	}
	if (cp < 0x80) {
		p[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		p[0] = (char)(0xc0 | cp >> 6);
		p[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		p[0] = (char)(0xe0 | cp >> 12);
		p[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		p[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	p[0] = (char)(0xf0 | cp >> 18);
	p[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	p[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	p[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static void test_random_strings(void **state)
{
	(void)state;
	char buf[256];
	srand(18);
	n_valid = n_invalid = 0;
	for (int i = 0; i < 20000; i++) {
		size_t n = 0, want = (size_t)(rand() % 60);
		if (i % 2) {
			while (n + 4 <= want)
				n += put_cp(buf + n);
			if (i % 10 == 1 && n > 0)
				buf[rand() % n] = (char)(rand() % 256); /* a little damage */
		} else {
			for (; n < want; n++)
				buf[n] = (char)(rand() % 256);
		}
		same(buf, n);
	}
	/* Both answers were exercised. */
	assert_true(n_valid > 5000);
	assert_true(n_invalid > 5000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_byte),
		cmocka_unit_test(test_utf8_edges),
		cmocka_unit_test(test_random_strings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
