/*
 * proxy_parse.c: parsers for what a sandboxed client sends the allow-list
 * proxy: the HTTP/1.x request head, the upstream rewrite of a forwarded
 * request, the SOCKS5 greeting and request.  Pure functions over untrusted
 * bytes, no I/O, no allocation (tests/fuzz/fuzz_proxy.c drives them).
 *
 * Strict on purpose: whatever is ambiguous (bare CR or LF, NUL, folded
 * lines, two Hosts, two Content-Lengths, Transfer-Encoding) is refused
 * rather than guessed at, so the proxy and the upstream can never disagree
 * on where a request ends or which host it is for.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "proxy_parse.h"

static int fail(sbx_proxy_http_req *r, int status, const char *reason)
{
	r->status = status;
	r->reason = reason;
	return SBX_PP_ERROR;
}

static bool is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_hostchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c == '-' || c == '.' || c == '_';
}

static bool is_v6char(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
	       c == ':' || c == '.';
}

/* Decimal port 1..65535, all of s[0..n). */
static bool parse_port(const char *s, size_t n, uint16_t *port)
{
	unsigned long v = 0;

	if (n == 0 || n > 5)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return false;
	*port = (uint16_t)v;
	return true;
}

/*
 * An authority host[:port] or [v6][:port] in s[0..n).  A missing port is
 * def (0: required).  Host goes to host[] without brackets.
 */
static bool parse_authority(const char *s, size_t n, uint16_t def, char *host, uint16_t *port)
{
	size_t hlen, i;
	const char *h, *rest;
	size_t restn;

	if (n == 0)
		return false;
	if (s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close)
			return false;
		h = s + 1;
		hlen = (size_t)(close - h);
		if (hlen == 0)
			return false;
		for (i = 0; i < hlen; i++)
			if (!is_v6char((unsigned char)h[i]))
				return false;
		rest = close + 1;
		restn = n - (size_t)(rest - s);
	} else {
		const char *colon = memchr(s, ':', n);
		h = s;
		hlen = colon ? (size_t)(colon - s) : n;
		if (hlen == 0)
			return false;
		for (i = 0; i < hlen; i++)
			if (!is_hostchar((unsigned char)h[i]))
				return false;
		rest = s + hlen;
		restn = n - hlen;
	}
	if (hlen > SBX_PROXY_HOST_MAX)
		return false;
	if (restn == 0) {
		if (!def)
			return false;
		*port = def;
	} else {
		if (rest[0] != ':' || !parse_port(rest + 1, restn - 1, port))
			return false;
	}
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	return true;
}

static bool name_is(const char *buf, const sbx_proxy_hdr *h, const char *name)
{
	return h->name_len == strlen(name) &&
	       strncasecmp(buf + h->name_off, name, h->name_len) == 0;
}

/* The request line buf[0..n) (CRLF excluded). */
static int parse_request_line(const char *buf, size_t n, sbx_proxy_http_req *r)
{
	const char *sp1 = memchr(buf, ' ', n), *sp2, *t;
	size_t tlen;

	if (!sp1 || sp1 == buf)
		return fail(r, 400, "malformed request line");
	for (const char *c = buf; c < sp1; c++)
		if (!is_tchar((unsigned char)*c))
			return fail(r, 400, "malformed request method");
	if (sp1 - buf > 32)
		return fail(r, 400, "request method too long");
	r->method_len = (uint16_t)(sp1 - buf);
	t = sp1 + 1;
	sp2 = memchr(t, ' ', n - (size_t)(t - buf));
	if (!sp2 || sp2 == t)
		return fail(r, 400, "malformed request line");
	tlen = (size_t)(sp2 - t);
	if (n - (size_t)(sp2 + 1 - buf) != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
	    (sp2[8] != '0' && sp2[8] != '1'))
		return fail(r, 400, "not an HTTP/1.0 or HTTP/1.1 request");
	r->minor = sp2[8] - '0';
	for (size_t i = 0; i < tlen; i++)
		if ((unsigned char)t[i] <= ' ' || t[i] == 0x7f)
			return fail(r, 400, "malformed request target");

	if (r->method_len == 7 && memcmp(buf, "CONNECT", 7) == 0) {
		r->connect = true;
		if (!parse_authority(t, tlen, 0, r->host, &r->port))
			return fail(r, 400, "CONNECT needs host:port");
		return SBX_PP_OK;
	}
	if (t[0] == '/' || t[0] == '*')
		return fail(r, 400, "a proxy request needs an absolute http:// URI (or CONNECT)");
	if (tlen >= 8 && strncasecmp(t, "https://", 8) == 0)
		return fail(r, 400, "https:// goes through CONNECT, not plain forwarding");
	if (tlen < 7 || strncasecmp(t, "http://", 7) != 0)
		return fail(r, 400, "only http:// URIs can be forwarded");
	{
		const char *a = t + 7, *end = t + tlen, *pe = a;
		while (pe < end && *pe != '/' && *pe != '?' && *pe != '#')
			pe++;
		if (memchr(a, '@', (size_t)(pe - a)))
			return fail(r, 400, "user information in the URI is not supported");
		if (!parse_authority(a, (size_t)(pe - a), 80, r->host, &r->port))
			return fail(r, 400, "malformed host in the URI");
		/* the fragment is the client's business */
		const char *fe = memchr(pe, '#', (size_t)(end - pe));
		if (fe)
			end = fe;
		r->path_off = (uint16_t)(pe - buf);
		r->path_len = (uint16_t)(end - pe);
	}
	return SBX_PP_OK;
}

static int parse_header(const char *buf, size_t off, size_t n, sbx_proxy_http_req *r)
{
	const char *l = buf + off, *colon = memchr(l, ':', n);
	size_t vs, ve;
	sbx_proxy_hdr *h;

	if (l[0] == ' ' || l[0] == '\t')
		return fail(r, 400, "folded header lines are not supported");
	if (!colon || colon == l)
		return fail(r, 400, "malformed header line");
	for (const char *c = l; c < colon; c++)
		if (!is_tchar((unsigned char)*c))
			return fail(r, 400, "malformed header name");
	for (size_t i = (size_t)(colon - l) + 1; i < n; i++) {
		unsigned char c = (unsigned char)l[i];
		if ((c < ' ' && c != '\t') || c == 0x7f)
			return fail(r, 400, "control character in a header value");
	}
	if (r->n_hdrs == SBX_PROXY_MAX_HEADERS)
		return fail(r, 431, "too many header fields");
	vs = (size_t)(colon - l) + 1;
	ve = n;
	while (vs < ve && (l[vs] == ' ' || l[vs] == '\t'))
		vs++;
	while (ve > vs && (l[ve - 1] == ' ' || l[ve - 1] == '\t'))
		ve--;
	h = &r->hdrs[r->n_hdrs++];
	h->name_off = (uint16_t)off;
	h->name_len = (uint16_t)(colon - l);
	h->val_off = (uint16_t)(off + vs);
	h->val_len = (uint16_t)(ve - vs);

	if (name_is(buf, h, "host")) {
		if (r->has_host)
			return fail(r, 400, "more than one Host header");
		r->has_host = true;
		if (!parse_authority(buf + h->val_off, h->val_len, 80, r->host_hdr_host,
				     &r->host_hdr_port))
			return fail(r, 400, "malformed Host header");
	} else if (name_is(buf, h, "content-length")) {
		int64_t v = 0;
		if (r->content_length >= 0)
			return fail(r, 400, "more than one Content-Length header");
		if (h->val_len == 0 || h->val_len > 15)
			return fail(r, 400, "malformed Content-Length");
		for (size_t i = 0; i < h->val_len; i++) {
			char c = buf[h->val_off + i];
			if (c < '0' || c > '9')
				return fail(r, 400, "malformed Content-Length");
			v = v * 10 + (c - '0');
		}
		r->content_length = v;
	} else if (name_is(buf, h, "transfer-encoding")) {
		return fail(r, 501,
			    "Transfer-Encoding (chunked request bodies) is not supported; "
			    "send a Content-Length");
	}
	return SBX_PP_OK;
}

int sbx_proxy_http_parse(const char *buf, size_t len, sbx_proxy_http_req *r)
{
	size_t off = 0, lim = len < SBX_PROXY_HEAD_MAX ? len : SBX_PROXY_HEAD_MAX;
	bool first = true;

	memset(r, 0, sizeof(*r));
	r->content_length = -1;
	for (;;) {
		const char *lf = memchr(buf + off, '\n', lim - off);
		size_t n;
		int rc;

		if (memchr(buf + off, '\0', (lf ? (size_t)(lf - buf) : lim) - off))
			return fail(r, 400, "NUL byte in the request head");
		if (!lf) {
			const char *cr = memchr(buf + off, '\r', lim - off);
			if (cr && (size_t)(cr - buf) + 1 < lim)
				return fail(r, 400, "CR without LF in the request head");
			if (len >= SBX_PROXY_HEAD_MAX)
				return fail(r, 431, "request head larger than 16 KiB");
			return SBX_PP_INCOMPLETE;
		}
		n = (size_t)(lf - (buf + off));
		if (n == 0 || buf[off + n - 1] != '\r')
			return fail(r, 400, "bare LF in the request head (lines end in CRLF)");
		n--;
		if (memchr(buf + off, '\r', n))
			return fail(r, 400, "CR without LF in the request head");
		if (first) {
			if (n == 0)
				return fail(r, 400, "empty request line");
			if ((rc = parse_request_line(buf, n, r)) != SBX_PP_OK)
				return rc;
			first = false;
		} else if (n == 0) {
			r->head_len = off + 2;
			break;
		} else if ((rc = parse_header(buf, off, n, r)) != SBX_PP_OK) {
			return rc;
		}
		off += n + 2;
	}
	if (!r->connect && r->has_host &&
	    (strcasecmp(r->host_hdr_host, r->host) != 0 || r->host_hdr_port != r->port))
		return fail(r, 400, "Host header does not agree with the request target");
	return SBX_PP_OK;
}

/* Does the Connection header of r list the name buf[off..off+len)? */
static bool connection_lists(const char *buf, const sbx_proxy_http_req *r, const char *name,
			     size_t nlen)
{
	for (size_t i = 0; i < r->n_hdrs; i++) {
		const sbx_proxy_hdr *h = &r->hdrs[i];
		if (!name_is(buf, h, "connection"))
			continue;
		const char *v = buf + h->val_off, *e = v + h->val_len;
		while (v < e) {
			while (v < e && (*v == ' ' || *v == '\t' || *v == ','))
				v++;
			const char *s = v;
			while (v < e && *v != ',' && *v != ' ' && *v != '\t')
				v++;
			if ((size_t)(v - s) == nlen && nlen && strncasecmp(s, name, nlen) == 0)
				return true;
		}
	}
	return false;
}

static bool put(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
	if (cap - *n < len)
		return false;
	memcpy(out + *n, s, len);
	*n += len;
	return true;
}

long sbx_proxy_http_rewrite(const char *buf, const sbx_proxy_http_req *r, char *out, size_t cap)
{
	static const char *const hop[] = {"connection", "keep-alive",	     "te",
					  "trailer",	"transfer-encoding", "upgrade"};
	size_t n = 0;
	bool ok = put(out, cap, &n, buf, r->method_len) && put(out, cap, &n, " ", 1);

	if (r->path_len == 0 || buf[r->path_off] != '/')
		ok = ok && put(out, cap, &n, "/", 1);
	ok = ok && put(out, cap, &n, buf + r->path_off, r->path_len);
	ok = ok && put(out, cap, &n, r->minor ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n", 11);
	for (size_t i = 0; ok && i < r->n_hdrs; i++) {
		const sbx_proxy_hdr *h = &r->hdrs[i];
		bool skip = h->name_len >= 6 && strncasecmp(buf + h->name_off, "proxy-", 6) == 0;
		for (size_t k = 0; !skip && k < sizeof(hop) / sizeof(hop[0]); k++)
			skip = name_is(buf, h, hop[k]);
		if (skip || connection_lists(buf, r, buf + h->name_off, h->name_len))
			continue;
		ok = put(out, cap, &n, buf + h->name_off, h->name_len) &&
		     put(out, cap, &n, ": ", 2) &&
		     put(out, cap, &n, buf + h->val_off, h->val_len) &&
		     put(out, cap, &n, "\r\n", 2);
	}
	ok = ok && put(out, cap, &n, "Connection: close\r\n\r\n", 21);
	return ok ? (long)n : -1;
}

int sbx_proxy_socks_greeting(const uint8_t *buf, size_t len, size_t *used, bool *noauth)
{
	if (len < 1)
		return SBX_PP_INCOMPLETE;
	if (buf[0] != 5)
		return SBX_PP_ERROR;
	if (len < 2)
		return SBX_PP_INCOMPLETE;
	if (buf[1] == 0)
		return SBX_PP_ERROR;
	if (len < 2 + (size_t)buf[1])
		return SBX_PP_INCOMPLETE;
	*noauth = memchr(buf + 2, 0, buf[1]) != NULL;
	*used = 2 + (size_t)buf[1];
	return SBX_PP_OK;
}

static int sfail(sbx_proxy_socks_req *r, uint8_t reply)
{
	r->reply = reply;
	return SBX_PP_ERROR;
}

int sbx_proxy_socks_request(const uint8_t *buf, size_t len, sbx_proxy_socks_req *r)
{
	size_t alen;
	const uint8_t *a;

	memset(r, 0, sizeof(*r));
	if (len < 4)
		return SBX_PP_INCOMPLETE;
	if (buf[0] != 5 || buf[2] != 0)
		return sfail(r, 0x01);
	if (buf[3] == 1)
		alen = 4;
	else if (buf[3] == 4)
		alen = 16;
	else if (buf[3] == 3) {
		if (len < 5)
			return SBX_PP_INCOMPLETE;
		alen = 1 + (size_t)buf[4];
	} else
		return sfail(r, 0x08);
	if (len < 4 + alen + 2)
		return SBX_PP_INCOMPLETE;
	if (buf[1] != 1)
		return sfail(r, 0x07);
	a = buf + 4;
	if (buf[3] == 1) {
		inet_ntop(AF_INET, a, r->host, sizeof(r->host));
	} else if (buf[3] == 4) {
		inet_ntop(AF_INET6, a, r->host, sizeof(r->host));
	} else {
		size_t n = buf[4];
		if (n == 0)
			return sfail(r, 0x01);
		for (size_t i = 0; i < n; i++)
			if (!is_hostchar(a[1 + i]))
				return sfail(r, 0x01);
		memcpy(r->host, a + 1, n);
		r->host[n] = '\0';
	}
	r->port = (uint16_t)(a[alen] << 8 | a[alen + 1]);
	if (r->port == 0)
		return sfail(r, 0x01);
	r->used = 4 + alen + 2;
	return SBX_PP_OK;
}
