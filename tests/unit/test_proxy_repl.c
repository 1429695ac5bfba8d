/*
 * test_proxy_repl.c: the streaming replacement of secret interception
 * (src/core/proxy_repl.c).  A value split across pieces at any point,
 * fed a byte at a time, next to a partial match or to another value, is
 * replaced exactly as in one piece; nothing is lost or duplicated.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy_repl.h"

struct acc {
	char b[4096];
	size_t n;
};

static int put(void *ud, const char *b, size_t n)
{
	struct acc *a = ud;
	assert_true(a->n + n < sizeof(a->b));
	memcpy(a->b + a->n, b, n);
	a->n += n;
	a->b[a->n] = '\0';
	return 0;
}

static void setup_repl(struct repl *r)
{
	memset(r, 0, sizeof(*r));
	r->from[0] = "sk-SECRET-value";
	r->to[0] = "PH_1";
	r->from[1] = "tok2";
	r->to[1] = "PLACEHOLDER_TWO";
	r->n = 2;
	for (size_t i = 0; i < r->n; i++) {
		r->flen[i] = strlen(r->from[i]);
		r->tlen[i] = strlen(r->to[i]);
		if (r->flen[i] > r->maxf)
			r->maxf = r->flen[i];
	}
}

/* in fed as pieces cut at a, b (a <= b), then the end. */
static void feed3(const char *in, size_t a, size_t b, struct acc *out)
{
	struct repl r;
	size_t n = strlen(in);

	setup_repl(&r);
	out->n = 0;
	out->b[0] = '\0';
	assert_int_equal(sbx_repl_feed(&r, in, a, false, put, out), 0);
	assert_int_equal(sbx_repl_feed(&r, in + a, b - a, false, put, out), 0);
	assert_int_equal(sbx_repl_feed(&r, in + b, n - b, false, put, out), 0);
	assert_int_equal(sbx_repl_feed(&r, NULL, 0, true, put, out), 0);
	free(r.held);
}

static void test_every_split(void **state)
{
	static const char *const cases[][2] = {
		{"Bearer sk-SECRET-value\n", "Bearer PH_1\n"},
		{"sk-SECRET-valu sk-SECRET-value", "sk-SECRET-valu PH_1"},
		{"sk-SECRET-valuesk-SECRET-value", "PH_1PH_1"},
		{"a tok2 b sk-SECRET-value c tok", "a PLACEHOLDER_TWO b PH_1 c tok"},
		{"nothing to see here", "nothing to see here"},
		{"sk-sk-SECRET-value", "sk-PH_1"},
		{"", ""},
	};
	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t n = strlen(cases[c][0]);
		for (size_t a = 0; a <= n; a++)
			for (size_t b = a; b <= n; b++) {
				struct acc out;
				feed3(cases[c][0], a, b, &out);
				if (strcmp(out.b, cases[c][1]))
					fail_msg("%s split at %zu,%zu: got %s", cases[c][0], a, b,
						 out.b);
			}
	}
}

static void test_byte_at_a_time(void **state)
{
	const char *in = "x: sk-SECRET-value; y: tok2tok2; z: sk-SECRET-valu";
	struct repl r;
	struct acc out = {.n = 0};

	(void)state;
	setup_repl(&r);
	for (size_t i = 0; in[i]; i++)
		assert_int_equal(sbx_repl_feed(&r, in + i, 1, false, put, &out), 0);
	/* only a possible match's start is held back: at most maxf - 1 */
	assert_true(r.hlen < r.maxf);
	assert_int_equal(sbx_repl_feed(&r, NULL, 0, true, put, &out), 0);
	assert_string_equal(out.b, "x: PH_1; y: PLACEHOLDER_TWOPLACEHOLDER_TWO; z: sk-SECRET-valu");
	assert_null(r.held);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_split),
		cmocka_unit_test(test_byte_at_a_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
