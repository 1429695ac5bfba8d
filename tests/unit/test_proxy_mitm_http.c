/*
 * test_proxy_mitm_http.c: the HTTP/1.1 relay of secret interception
 * (src/core/proxy_mitm_http.c) attacked from the sandbox's side, without
 * TLS: both sides of a struct mitm_conn are socketpairs (no SSL: the relay
 * reads and writes them plainly), the client's request and the upstream's
 * response are written up front, and sbx_mitm_serve runs to the end on the
 * test's thread.  Each attack has its control: the same exchange done
 * right does carry the value upstream (so the probe sees a success).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy_mitm.h"

#define VALUE "sk-REAL-value-0123456789"
#define PH "sbx_secret_KEY_0011223344556677_"

struct ex {
	char up[16384];	 /* what reached the upstream */
	char cli[16384]; /* what reached the client */
};

static void slurp(int fd, char *b, size_t cap)
{
	size_t n = 0;
	ssize_t k;

	while (n + 1 < cap && (k = read(fd, b + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	b[n] = '\0';
}

/* One connection to api.test:443: req from the client, resp from the
 * upstream; header: the secret's header (NULL: placeholder only). */
static void exchange(const char *req, const char *resp, const char *header, struct ex *ex)
{
	static char *hosts[] = {"api.test"};
	struct mitm_secret s = {.placeholder = PH, .value = VALUE, .hosts = hosts, .n_hosts = 1};
	struct mitm_tag t = {.s = &s, .n = 1, .max_value = strlen(VALUE)};
	struct sbx_mitm m = {.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
	struct mitm_conn mc = {.m = &m, .t = &t, .tls = true, .port = 443, .n_use = 1};
	int c[2], u[2];

	if (header) {
		s.header = (char *)header;
		s.hval = "Bearer " VALUE;
	}
	pthread_mutex_init(&m.lock, NULL);
	snprintf(mc.name, sizeof(mc.name), "api.test");
	mc.use[0] = &s;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, u), 0);
	assert_int_equal(write(c[1], req, strlen(req)), (ssize_t)strlen(req));
	assert_int_equal(write(u[1], resp, strlen(resp)), (ssize_t)strlen(resp));
	shutdown(c[1], SHUT_WR);
	shutdown(u[1], SHUT_WR);
	mc.c.fd = c[0];
	mc.u.fd = u[0];
	sbx_mitm_serve(&mc);
	close(c[0]);
	close(u[0]);
	slurp(u[1], ex->up, sizeof(ex->up));
	slurp(c[1], ex->cli, sizeof(ex->cli));
	close(c[1]);
	close(u[1]);
	free(mc.c.buf);
	free(mc.u.buf);
	for (size_t i = 0; i < m.n_lines; i++) {
		assert_null(strstr(m.lines[i], VALUE)); /* no log line holds it */
		free(m.lines[i]);
	}
	free(m.lines);
	close(m.efd);
	pthread_mutex_destroy(&m.lock);
}

static const char OK[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/* The control for all below: a request for the host carries the value. */
static void test_control_substitutes(void **state)
{
	struct ex ex;
	(void)state;
	exchange("GET /v1?k=" PH " HTTP/1.1\r\nHost: api.test\r\nX-Key: " PH
		 "\r\nConnection: close\r\n\r\n",
		 OK, NULL, &ex);
	assert_non_null(strstr(ex.up, "GET /v1?k=" VALUE " HTTP/1.1\r\n"));
	assert_non_null(strstr(ex.up, "X-Key: " VALUE "\r\n"));
	assert_non_null(strstr(ex.cli, "200 OK"));
	/* with the port, and any case, the Host is still this host */
	exchange("GET / HTTP/1.1\r\nHost: API.test:443\r\nConnection: close\r\n\r\n", OK,
		 "Authorization", &ex);
	assert_non_null(strstr(ex.up, "Authorization: Bearer " VALUE "\r\n"));
}

/* A Host header naming another host (a shared front end routes on it):
 * the value must not go with it. */
static void test_host_mismatch_refused(void **state)
{
	static const char *const reqs[] = {
		"GET / HTTP/1.1\r\nHost: evil.test\r\nX-Key: " PH "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.test.evil.test\r\nX-Key: " PH "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.test:8443\r\nX-Key: " PH "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\nX-Key: " PH "\r\n\r\n",
		/* absolute-form inside the tunnel: a server takes its host over Host */
		"GET https://evil.test/ HTTP/1.1\r\nHost: api.test\r\nX-Key: " PH "\r\n\r\n",
		"GET //evil.test/ HTTP/1.1\r\nHost: api.test\r\nX-Key: " PH "\r\n\r\n",
		"CONNECT evil.test:443 HTTP/1.1\r\nHost: api.test\r\nX-Key: " PH "\r\n\r\n",
	};
	(void)state;
	for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
		struct ex ex;
		exchange(reqs[i], OK, "Authorization", &ex);
		if (strstr(ex.up, VALUE))
			fail_msg("request %zu sent the value upstream: %s", i, ex.up);
		assert_non_null(strstr(ex.cli, "HTTP/1.1 4"));
	}
}

/* A request without Host gets the tunnel's own (the upstream must not
 * route it to a default host). */
static void test_host_added(void **state)
{
	struct ex ex;
	(void)state;
	exchange("GET / HTTP/1.0\r\nX-Key: " PH "\r\n\r\n", OK, NULL, &ex);
	assert_non_null(strstr(ex.up, "X-Key: " VALUE "\r\n"));
	assert_non_null(strstr(ex.up, "\r\nHost: api.test\r\n"));
}

/* The upstream echoes the value as a header NAME (httpbin's
 * /response-headers?<name>=x does): it comes back as the placeholder. */
static void test_value_in_response_header_name(void **state)
{
	struct ex ex;
	(void)state;
	exchange("GET /response-headers?" PH "=x HTTP/1.1\r\nHost: api.test\r\n\r\n",
		 "HTTP/1.1 200 OK\r\n" VALUE ": x\r\nContent-Length: 2\r\n\r\nok", NULL, &ex);
	assert_non_null(strstr(ex.up, "?" VALUE "=x")); /* the control: it went */
	assert_null(strstr(ex.cli, VALUE));
	assert_non_null(strstr(ex.cli, PH ": x\r\n"));
}

/* A transfer coding other than chunked (gzip) would pass the body on
 * unscanned: refused, on either side; so is a length the upstream may
 * read differently. */
static void test_framing_strict(void **state)
{
	struct ex ex;
	(void)state;
	exchange("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n",
		 "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
		 "3\r\nabc\r\n0\r\n\r\n",
		 NULL, &ex);
	assert_non_null(strstr(ex.cli, "502 Bad Gateway"));
	assert_null(strstr(ex.cli, "abc"));
	exchange("POST / HTTP/1.1\r\nHost: api.test\r\nX-Key: " PH
		 "\r\nTransfer-Encoding: xchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		 OK, NULL, &ex);
	assert_null(strstr(ex.up, VALUE));
	assert_non_null(strstr(ex.cli, "400 Bad Request"));
	exchange("POST / HTTP/1.1\r\nHost: api.test\r\nX-Key: " PH
		 "\r\nContent-Length: +3\r\n\r\nabc",
		 OK, NULL, &ex);
	assert_null(strstr(ex.up, VALUE));
	assert_non_null(strstr(ex.cli, "400 Bad Request"));
	/* the control: chunked as such is relayed */
	exchange("POST / HTTP/1.1\r\nHost: api.test\r\nX-Key: " PH
		 "\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n", NULL,
		 &ex);
	assert_non_null(strstr(ex.up, "X-Key: " VALUE "\r\n"));
	assert_non_null(strstr(ex.cli, "xyz"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_control_substitutes),
		cmocka_unit_test(test_host_mismatch_refused),
		cmocka_unit_test(test_host_added),
		cmocka_unit_test(test_value_in_response_header_name),
		cmocka_unit_test(test_framing_strict),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
