/*
 * fuzz_proxy.c: libFuzzer target for the proxy's parsers of untrusted bytes
 * (src/core/proxy_parse.c).  The first input byte picks the parser:
 *   even: sbx_proxy_http_parse over the rest, then (when it parsed an
 *         absolute-form request) sbx_proxy_http_rewrite;
 *   odd:  sbx_proxy_socks_greeting, then sbx_proxy_socks_request on what
 *         follows the greeting.
 * Properties (abort() on violation):
 *   - a parsed head lies inside the input, names a non-empty host without
 *     NUL and a port >= 1, and every header offset is inside the head;
 *   - an error names a status in {400, 431, 501} and a reason;
 *   - INCOMPLETE only below SBX_PROXY_HEAD_MAX bytes;
 *   - the rewrite fits 2 * SBX_PROXY_HEAD_MAX, starts with the method, has
 *     only CRLF line ends, no Proxy-* / Connection field but the final
 *     "Connection: close", and ends the head there;
 *   - a SOCKS5 request parsed has a port >= 1 and used <= len; a refusal
 *     has a non-zero reply code.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy_parse.h"

static void check_rewrite(const char *buf, const sbx_proxy_http_req *r)
{
	static char out[2 * SBX_PROXY_HEAD_MAX];
	long n = sbx_proxy_http_rewrite(buf, r, out, sizeof(out));
	static const char tail[] = "Connection: close\r\n\r\n";

	if (n < (long)sizeof(tail) - 1 || memcmp(out, buf, r->method_len) != 0)
		abort();
	if (memcmp(out + n - (sizeof(tail) - 1), tail, sizeof(tail) - 1) != 0)
		abort();
	for (long i = 0; i < n; i++) {
		if (out[i] == '\r' && (i + 1 >= n || out[i + 1] != '\n'))
			abort();
		if (out[i] == '\n' && (i == 0 || out[i - 1] != '\r'))
			abort();
		if (out[i] == '\0')
			abort();
		if (out[i] == '\n' && i + 1 < n) {
			const char *l = out + i + 1;
			size_t rest = (size_t)(n - i - 1);
			if (rest >= 6 && strncasecmp(l, "proxy-", 6) == 0)
				abort();
			if (rest >= 11 && strncasecmp(l, "connection:", 11) == 0 &&
			    rest != sizeof(tail) - 1)
				abort();
			if (rest == 2 && i + 3 != n)
				abort();
		}
	}
	/* the head ends exactly once: at the end */
	char *end = memmem(out, (size_t)n, "\r\n\r\n", 4);
	if (!end || end + 4 != out + n)
		abort();
}

static void http(const char *buf, size_t len)
{
	sbx_proxy_http_req r;
	int rc = sbx_proxy_http_parse(buf, len, &r);

	if (rc == SBX_PP_INCOMPLETE) {
		if (len >= SBX_PROXY_HEAD_MAX)
			abort();
		return;
	}
	if (rc == SBX_PP_ERROR) {
		if ((r.status != 400 && r.status != 431 && r.status != 501) || !r.reason)
			abort();
		return;
	}
	if (rc != SBX_PP_OK || r.head_len > len || r.head_len > SBX_PROXY_HEAD_MAX)
		abort();
	if (!r.host[0] || r.port == 0 || strlen(r.host) > SBX_PROXY_HOST_MAX)
		abort();
	for (size_t i = 0; i < r.n_hdrs; i++)
		if ((size_t)r.hdrs[i].val_off + r.hdrs[i].val_len > r.head_len ||
		    (size_t)r.hdrs[i].name_off + r.hdrs[i].name_len > r.head_len)
			abort();
	if (!r.connect) {
		if ((size_t)r.path_off + r.path_len > r.head_len)
			abort();
		if (r.has_host &&
		    (strcasecmp(r.host_hdr_host, r.host) || r.host_hdr_port != r.port))
			abort();
		check_rewrite(buf, &r);
	}
}

static void socks(const uint8_t *buf, size_t len)
{
	size_t used = 0;
	bool noauth = false;
	sbx_proxy_socks_req r;
	int rc = sbx_proxy_socks_greeting(buf, len, &used, &noauth);

	if (rc != SBX_PP_OK)
		return;
	if (used > len)
		abort();
	rc = sbx_proxy_socks_request(buf + used, len - used, &r);
	if (rc == SBX_PP_OK && (r.port == 0 || r.used > len - used || !r.host[0]))
		abort();
	if (rc == SBX_PP_ERROR && r.reply == 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	/* a copy of exactly the input, so ASan sees any overread */
	char *buf = malloc(size - 1 ? size - 1 : 1);
	memcpy(buf, data + 1, size - 1);
	if (data[0] % 2 == 0)
		http(buf, size - 1);
	else
		socks((const uint8_t *)buf, size - 1);
	free(buf);
	return 0;
}
