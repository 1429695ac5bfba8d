/*
 * test_proxy_parse.c: the proxy's parsers of untrusted bytes
 * (src/core/proxy_parse.c): HTTP request heads, the upstream rewrite,
 * SOCKS5 greetings and requests.  Every malformed input must give an
 * error with the right status, never a guess.
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

#include "proxy_parse.h"

static sbx_proxy_http_req R;

static int parse(const char *s)
{
	return sbx_proxy_http_parse(s, strlen(s), &R);
}

static void expect_error(const char *s, int status)
{
	int rc = parse(s);
	if (rc != SBX_PP_ERROR || R.status != status)
		fail_msg("%s: rc %d status %d (want error %d)", s, rc, R.status, status);
	assert_non_null(R.reason);
}

static void test_connect(void **state)
{
	(void)state;
	assert_int_equal(parse("CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\nextra"),
			 SBX_PP_OK);
	assert_true(R.connect);
	assert_string_equal(R.host, "example.com");
	assert_int_equal(R.port, 443);
	assert_int_equal(R.head_len, strlen("CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"));

	assert_int_equal(parse("CONNECT [2001:db8::1]:8443 HTTP/1.0\r\n\r\n"), SBX_PP_OK);
	assert_string_equal(R.host, "2001:db8::1");
	assert_int_equal(R.port, 8443);
	assert_int_equal(R.minor, 0);

	assert_int_equal(parse("CONNECT 10.0.0.1:80 HTTP/1.1\r\n\r\n"), SBX_PP_OK);
	assert_string_equal(R.host, "10.0.0.1");

	expect_error("CONNECT example.com HTTP/1.1\r\n\r\n", 400); /* no port */
	expect_error("CONNECT example.com:0 HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT example.com:65536 HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT example.com:44x HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT [2001:db8::1 HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT [zz::1]:80 HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT [::1]:80x HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT :443 HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT a@b:443 HTTP/1.1\r\n\r\n", 400);
	expect_error("CONNECT a%00b:443 HTTP/1.1\r\n\r\n", 400);
}

static void test_absolute_form(void **state)
{
	(void)state;
	const char *s =
		"GET http://Example.COM:8080/a/b?q=1#frag HTTP/1.1\r\nhost: example.com:8080\r\n"
		"Content-Length: 5\r\n\r\n";
	assert_int_equal(parse(s), SBX_PP_OK);
	assert_false(R.connect);
	assert_string_equal(R.host, "Example.COM");
	assert_int_equal(R.port, 8080);
	assert_int_equal(R.content_length, 5);
	assert_int_equal(R.path_len, strlen("/a/b?q=1"));
	assert_memory_equal(s + R.path_off, "/a/b?q=1", R.path_len);

	assert_int_equal(parse("GET http://h HTTP/1.1\r\n\r\n"), SBX_PP_OK);
	assert_int_equal(R.port, 80);
	assert_int_equal(R.path_len, 0);
	assert_int_equal(R.content_length, -1);
	assert_int_equal(parse("GET http://[::1]:81/ HTTP/1.1\r\nHost: [::1]:81\r\n\r\n"),
			 SBX_PP_OK);
	assert_string_equal(R.host, "::1");

	expect_error("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", 400); /* origin-form */
	expect_error("OPTIONS * HTTP/1.1\r\n\r\n", 400);
	expect_error("GET https://example.com/ HTTP/1.1\r\n\r\n", 400);
	expect_error("GET ftp://example.com/ HTTP/1.1\r\n\r\n", 400);
	expect_error("GET http://user@example.com/ HTTP/1.1\r\n\r\n", 400);
	expect_error("GET http://example.com/ HTTP/1.1\r\nHost: other.com\r\n\r\n", 400);
	expect_error("GET http://example.com/ HTTP/1.1\r\nHost: example.com:81\r\n\r\n", 400);
	expect_error("GET http://example.com:81/ HTTP/1.1\r\nHost: example.com\r\n\r\n", 400);
	/* Host case-insensitive and default port agree */
	assert_int_equal(parse("GET http://example.com/ HTTP/1.1\r\nHost: EXAMPLE.com:80\r\n\r\n"),
			 SBX_PP_OK);
}

static void test_bad_heads(void **state)
{
	(void)state;
	expect_error("GET http://h/ HTTP/2.0\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1 \r\n\r\n", 400);
	expect_error("GET  http://h/ HTTP/1.1\r\n\r\n", 400);
	expect_error("G(T http://h/ HTTP/1.1\r\n\r\n", 400);
	expect_error("\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1\nHost: h\n\n", 400);	   /* bare LF */
	expect_error("GET http://h/ HTTP/1.1\r\nA: b\rc: d\r\n\r\n", 400); /* CR without LF */
	expect_error("GET http://h/ HTTP/1.1\rX", 400);
	expect_error("GET http://h/ HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400); /* folding */
	expect_error("GET http://h/ HTTP/1.1\r\nA b: c\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1\r\nA : c\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1\r\n: c\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1\r\nA: \x01\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n",
		     400); /* duplicate Host */
	expect_error("GET http://h/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		     400);
	expect_error("GET http://h/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n", 400);
	expect_error("GET http://h/ HTTP/1.1\r\nContent-Length: 99999999999999999\r\n\r\n", 400);
	expect_error("POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501);

	/* embedded NUL, in the request line and in a header */
	static const char nul1[] = "GET http://h/\0 HTTP/1.1\r\n\r\n";
	assert_int_equal(sbx_proxy_http_parse(nul1, sizeof(nul1) - 1, &R), SBX_PP_ERROR);
	assert_int_equal(R.status, 400);
	static const char nul2[] = "GET http://h/ HTTP/1.1\r\nA: b\0c\r\n\r\n";
	assert_int_equal(sbx_proxy_http_parse(nul2, sizeof(nul2) - 1, &R), SBX_PP_ERROR);
	static const char nul3[] = "GET http://h/ HTTP/1.1\r\nA: b\0";
	assert_int_equal(sbx_proxy_http_parse(nul3, sizeof(nul3) - 1, &R), SBX_PP_ERROR);
}

static void test_incomplete_and_huge(void **state)
{
	(void)state;
	assert_int_equal(parse(""), SBX_PP_INCOMPLETE);
	assert_int_equal(parse("CONNECT a:1 HTTP/1.1"), SBX_PP_INCOMPLETE);
	assert_int_equal(parse("CONNECT a:1 HTTP/1.1\r"), SBX_PP_INCOMPLETE);
	assert_int_equal(parse("CONNECT a:1 HTTP/1.1\r\nX: y\r\n"), SBX_PP_INCOMPLETE);
	assert_int_equal(parse("CONNECT a:1 HTTP/1.1\r\nX: y\r\n\r"), SBX_PP_INCOMPLETE);

	/* 16 KiB with no end: 431; the same with an end inside is fine */
	char *big = malloc(SBX_PROXY_HEAD_MAX + 64);
	assert_non_null(big);
	strcpy(big, "GET http://h/ HTTP/1.1\r\nX: ");
	size_t n = strlen(big);
	memset(big + n, 'a', SBX_PROXY_HEAD_MAX + 64 - n);
	assert_int_equal(sbx_proxy_http_parse(big, SBX_PROXY_HEAD_MAX + 64, &R), SBX_PP_ERROR);
	assert_int_equal(R.status, 431);
	assert_int_equal(sbx_proxy_http_parse(big, SBX_PROXY_HEAD_MAX, &R), SBX_PP_ERROR);
	assert_int_equal(R.status, 431);
	assert_int_equal(sbx_proxy_http_parse(big, SBX_PROXY_HEAD_MAX - 1, &R), SBX_PP_INCOMPLETE);
	memcpy(big + 8000, "\r\n\r\n", 4);
	assert_int_equal(sbx_proxy_http_parse(big, SBX_PROXY_HEAD_MAX + 64, &R), SBX_PP_OK);
	assert_int_equal(R.head_len, 8004);
	free(big);

	/* more than SBX_PROXY_MAX_HEADERS fields: 431 */
	char many[8192];
	size_t m = (size_t)snprintf(many, sizeof(many), "GET http://h/ HTTP/1.1\r\n");
	for (int i = 0; i <= SBX_PROXY_MAX_HEADERS; i++)
		m += (size_t)snprintf(many + m, sizeof(many) - m, "X%d: v\r\n", i);
	m += (size_t)snprintf(many + m, sizeof(many) - m, "\r\n");
	assert_int_equal(sbx_proxy_http_parse(many, m, &R), SBX_PP_ERROR);
	assert_int_equal(R.status, 431);
}

static void test_rewrite(void **state)
{
	(void)state;
	const char *s =
		"POST http://h:8080/x?y HTTP/1.1\r\nHost: h:8080\r\nProxy-Authorization: Basic x\r\n"
		"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\n"
		"X-Secret: 1\r\nKeep-Alive: 5\r\nUpgrade: h2c\r\nTE: trailers\r\n"
		"Content-Length: 3\r\nAccept:  */* \r\n\r\n";
	char out[2 * SBX_PROXY_HEAD_MAX];
	long n;

	assert_int_equal(parse(s), SBX_PP_OK);
	n = sbx_proxy_http_rewrite(s, &R, out, sizeof(out));
	assert_true(n > 0);
	out[n] = '\0';
	assert_string_equal(out, "POST /x?y HTTP/1.1\r\nHost: h:8080\r\nContent-Length: 3\r\n"
				 "Accept: */*\r\nConnection: close\r\n\r\n");
	assert_int_equal(sbx_proxy_http_rewrite(s, &R, out, 10), -1);

	assert_int_equal(parse("GET http://h?q HTTP/1.0\r\n\r\n"), SBX_PP_OK);
	n = sbx_proxy_http_rewrite("GET http://h?q HTTP/1.0\r\n\r\n", &R, out, sizeof(out));
	out[n] = '\0';
	assert_string_equal(out, "GET /?q HTTP/1.0\r\nConnection: close\r\n\r\n");
}

static void test_socks(void **state)
{
	sbx_proxy_socks_req r;
	size_t used;
	bool noauth;
	(void)state;

	assert_int_equal(sbx_proxy_socks_greeting((const uint8_t *)"\x05", 1, &used, &noauth),
			 SBX_PP_INCOMPLETE);
	assert_int_equal(
		sbx_proxy_socks_greeting((const uint8_t *)"\x05\x02\x02", 3, &used, &noauth),
		SBX_PP_INCOMPLETE);
	assert_int_equal(
		sbx_proxy_socks_greeting((const uint8_t *)"\x05\x02\x02\x00", 4, &used, &noauth),
		SBX_PP_OK);
	assert_true(noauth);
	assert_int_equal(used, 4);
	assert_int_equal(
		sbx_proxy_socks_greeting((const uint8_t *)"\x05\x01\x02", 3, &used, &noauth),
		SBX_PP_OK);
	assert_false(noauth);
	assert_int_equal(sbx_proxy_socks_greeting((const uint8_t *)"\x04\x01", 2, &used, &noauth),
			 SBX_PP_ERROR);
	assert_int_equal(sbx_proxy_socks_greeting((const uint8_t *)"\x05\x00", 2, &used, &noauth),
			 SBX_PP_ERROR);

	/* IPv4 */
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x01\x7f\x00\x00\x01"
								  "\x01\xbb",
						 10, &r),
			 SBX_PP_OK);
	assert_string_equal(r.host, "127.0.0.1");
	assert_int_equal(r.port, 443);
	assert_int_equal(r.used, 10);
	/* domain */
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x03\x08pypi.org"
								  "\x00\x50",
						 4 + 1 + 8 + 1, &r),
			 SBX_PP_INCOMPLETE);
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x03\x08pypi.org"
								  "\x00\x50",
						 4 + 1 + 8 + 2, &r),
			 SBX_PP_OK);
	assert_string_equal(r.host, "pypi.org");
	assert_int_equal(r.port, 80);
	/* IPv6 */
	uint8_t v6[22] = {5, 1, 0, 4};
	v6[4 + 15] = 1;
	v6[21] = 22;
	assert_int_equal(sbx_proxy_socks_request(v6, 22, &r), SBX_PP_OK);
	assert_string_equal(r.host, "::1");
	assert_int_equal(r.port, 22);
	assert_int_equal(sbx_proxy_socks_request(v6, 21, &r), SBX_PP_INCOMPLETE);
	/* BIND, UDP ASSOCIATE: 0x07 */
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x02\x00\x01\x7f\x00\x00\x01"
								  "\x01\xbb",
						 10, &r),
			 SBX_PP_ERROR);
	assert_int_equal(r.reply, 0x07);
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x03\x00\x01\x7f\x00\x00\x01"
								  "\x01\xbb",
						 10, &r),
			 SBX_PP_ERROR);
	assert_int_equal(r.reply, 0x07);
	/* bad ATYP: 0x08 */
	assert_int_equal(
		sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x02\x00\x00", 6, &r),
		SBX_PP_ERROR);
	assert_int_equal(r.reply, 0x08);
	/* NUL, empty name, blank in a name, port 0, bad version */
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x03\x03"
								  "a\0b\x00\x50",
						 10, &r),
			 SBX_PP_ERROR);
	assert_int_equal(r.reply, 0x01);
	assert_int_equal(
		sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x03\x00\x00\x50", 7, &r),
		SBX_PP_ERROR);
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x03\x03"
								  "a b\x00\x50",
						 10, &r),
			 SBX_PP_ERROR);
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x05\x01\x00\x01\x7f\x00\x00\x01"
								  "\x00\x00",
						 10, &r),
			 SBX_PP_ERROR);
	assert_int_equal(sbx_proxy_socks_request((const uint8_t *)"\x04\x01\x00\x01\x7f\x00\x00\x01"
								  "\x00\x50",
						 10, &r),
			 SBX_PP_ERROR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect),	  cmocka_unit_test(test_absolute_form),
		cmocka_unit_test(test_bad_heads), cmocka_unit_test(test_incomplete_and_huge),
		cmocka_unit_test(test_rewrite),	  cmocka_unit_test(test_socks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
