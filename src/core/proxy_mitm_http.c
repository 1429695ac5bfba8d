/*
 * proxy_mitm_http.c: HTTP/1.1 through an intercepted connection (one
 * worker thread, blocking I/O; proxy_mitm.c set it up).  Each request of a
 * keep-alive connection in turn:
 *
 *   request head: the placeholder of each secret of this host becomes its
 *   value (request target and header values); a secret with a header
 *   drops the client's own header of that name and sets it; the client's
 *   Accept-Encoding becomes "identity" (a compressed response could not
 *   be scanned), Expect and Upgrade are dropped (no 100-continue
 *   handshake, no protocol switch through a substituting proxy);
 *   request body: relayed as framed (Content-Length or chunked);
 *   response: every secret value of the session becomes its placeholder,
 *   in the head and in the body, streaming (a value split across reads
 *   is still found: the last len-1 bytes wait for the next read), so the
 *   body is re-framed chunked (close-delimited to an HTTP/1.0 client).  A
 *   response with a Content-Encoding is refused (502) rather than passed
 *   on unscanned.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy_internal.h"
#include "proxy_mitm.h"
#include "proxy_repl.h"

#define HEAD_MAX (64 * 1024)
#define IO_CHUNK (16 * 1024)

/* ---- a growing buffer ---- */

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		/* not realloc: the old block (a head with the value in it)
		 * is cleared before it is freed */
		size_t cap = (b->len + n + 1) * 2;
		char *np = malloc(cap);
		if (!np) {
			b->oom = true;
			return;
		}
		if (b->p) {
			memcpy(np, b->p, b->len);
			explicit_bzero(b->p, b->cap);
		}
		free(b->p);
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_free(struct sbuf *b)
{
	if (b->p)
		explicit_bzero(b->p, b->cap);
	free(b->p);
	b->p = NULL;
}

/* ---- reading and writing one side ---- */

static ssize_t raw_read(struct mside *s, void *b, size_t n)
{
	ssize_t r;

	if (s->ssl) {
		int k = SSL_read(s->ssl, b, n > INT_MAX ? INT_MAX : (int)n);
		if (k > 0)
			return k;
		return SSL_get_error(s->ssl, k) == SSL_ERROR_ZERO_RETURN ? 0 : -1;
	}
	do
		r = recv(s->fd, b, n, 0);
	while (r < 0 && errno == EINTR);
	return r;
}

int sbx_mside_write(struct mside *s, const void *b, size_t n)
{
	const char *p = b;

	while (n > 0) {
		ssize_t k;
		if (s->ssl) {
			int w = SSL_write(s->ssl, p, n > INT_MAX ? INT_MAX : (int)n);
			k = w > 0 ? w : -1;
		} else {
			k = send(s->fd, p, n, MSG_NOSIGNAL);
			if (k < 0 && errno == EINTR)
				continue;
		}
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Read more into s->buf.  Returns bytes read, 0 at the end, -1 on error. */
static ssize_t fill(struct mside *s)
{
	ssize_t n;

	if (s->off > 0) {
		memmove(s->buf, s->buf + s->off, s->len - s->off);
		s->len -= s->off;
		s->off = 0;
	}
	if (s->cap - s->len < IO_CHUNK) {
		char *nb = realloc(s->buf, s->cap + IO_CHUNK);
		if (!nb)
			return -1;
		s->buf = nb;
		s->cap += IO_CHUNK;
	}
	n = raw_read(s, s->buf + s->len, s->cap - s->len);
	if (n > 0)
		s->len += (size_t)n;
	return n;
}

static size_t avail(const struct mside *s)
{
	return s->len - s->off;
}

/* A head ending in CRLF CRLF: its length; 0 when the peer is gone before
 * sending a byte of it (many TLS clients close without close_notify), -1
 * when it ends mid-head, -2 when the head is too large. */
static long read_head(struct mside *s)
{
	for (;;) {
		char *e = memmem(s->buf ? s->buf + s->off : "", avail(s), "\r\n\r\n", 4);
		if (e)
			return e + 4 - (s->buf + s->off);
		if (avail(s) >= HEAD_MAX)
			return -2;
		if (fill(s) <= 0)
			return avail(s) == 0 ? 0 : -1;
	}
}

/* One CRLF-terminated line (a chunk size, a trailer) into line. */
static int read_line(struct mside *s, char *line, size_t max)
{
	for (;;) {
		char *e = memmem(s->buf ? s->buf + s->off : "", avail(s), "\r\n", 2);
		if (e) {
			size_t n = (size_t)(e - (s->buf + s->off));
			if (n >= max)
				return -1;
			memcpy(line, s->buf + s->off, n);
			line[n] = '\0';
			s->off += n + 2;
			return 0;
		}
		if (avail(s) >= max || fill(s) <= 0)
			return -1;
	}
}

static int out_sbuf(void *ud, const char *b, size_t n)
{
	sb_put(ud, b, n);
	return 0;
}

/* s with every from replaced by its to, appended to b. */
static void sb_replaced(struct sbuf *b, struct repl *r, const char *s, size_t n)
{
	if (sbx_repl_feed(r, s, n, true, out_sbuf, b) < 0)
		b->oom = true;
}

/* ---- a body's way out ---- */

struct sink {
	struct mside *dst;
	bool chunked; /* frame what goes out as chunks */
	struct repl *r;
	uint64_t *counter;
	struct sbx_mitm *m;
};

static int sink_raw(void *ud, const char *b, size_t n)
{
	struct sink *k = ud;
	char hex[24];

	if (!n)
		return 0;
	if (k->chunked) {
		int hl = snprintf(hex, sizeof(hex), "%zx\r\n", n);
		if (sbx_mside_write(k->dst, hex, (size_t)hl) < 0)
			return -1;
	}
	if (sbx_mside_write(k->dst, b, n) < 0 ||
	    (k->chunked && sbx_mside_write(k->dst, "\r\n", 2) < 0))
		return -1;
	sbx_mitm_count(k->m, k->counter, n);
	return 0;
}

static int sink_put(struct sink *k, const char *b, size_t n)
{
	return k->r ? sbx_repl_feed(k->r, b, n, false, sink_raw, k) : sink_raw(k, b, n);
}

static int sink_end(struct sink *k)
{
	if (k->r && sbx_repl_feed(k->r, NULL, 0, true, sink_raw, k) < 0)
		return -1;
	return k->chunked ? sbx_mside_write(k->dst, "0\r\n\r\n", 5) : 0;
}

/* Up to n bytes of src's body (UINT64_MAX: until src ends) into k. */
static int copy_n(struct mside *src, uint64_t n, struct sink *k)
{
	while (n > 0) {
		if (!avail(src)) {
			ssize_t r = fill(src);
			if (r == 0 && n == UINT64_MAX)
				return 0;
			if (r <= 0)
				return -1;
		}
		size_t take = avail(src) < n ? avail(src) : (size_t)n;
		if (sink_put(k, src->buf + src->off, take) < 0)
			return -1;
		src->off += take;
		if (n != UINT64_MAX)
			n -= take;
	}
	return 0;
}

/* A chunked body from src, its data into k (trailers dropped). */
static int copy_chunked(struct mside *src, struct sink *k)
{
	char line[512];

	for (;;) {
		char *end;
		if (read_line(src, line, sizeof(line)) < 0)
			return -1;
		errno = 0;
		unsigned long long n = strtoull(line, &end, 16);
		if (end == line || errno || (*end && *end != ';' && *end != ' ' && *end != '\t'))
			return -1;
		if (n == 0)
			break;
		if (copy_n(src, n, k) < 0 || read_line(src, line, 3) < 0 || line[0])
			return -1;
	}
	do /* trailers, up to the empty line */
		if (read_line(src, line, sizeof(line)) < 0)
			return -1;
	while (line[0]);
	return 0;
}

/* ---- heads ---- */

struct head {
	char *line;	   /* first line, NUL-terminated in place */
	char *hdr[128][2]; /* name, value (trimmed), NUL-terminated in place */
	size_t n;
	bool chunked, bad;
	int64_t clen;	  /* -1: none */
	const char *host; /* the Host header, NULL: none */
	int n_host;
	bool conn_close;
	const char *encoding; /* Content-Encoding, NULL: none */
};

static bool ieq(const char *a, const char *b)
{
	return !strcasecmp(a, b);
}

/* Split the head in text (modified in place).  Returns -1 when malformed. */
static int parse_head(char *text, size_t len, struct head *h)
{
	char *p = text, *end = text + len - 2; /* at the final CRLF */

	memset(h, 0, sizeof(*h));
	h->clen = -1;
	if (memchr(text, '\0', len))
		return -1; /* C strings below: a NUL would cut a line short */
	for (bool first = true; p < end;) {
		char *eol = memmem(p, (size_t)(end - p) + 2, "\r\n", 2), *colon;
		if (!eol)
			return -1;
		*eol = '\0';
		if (strpbrk(p, "\r\n"))
			return -1; /* a bare CR or LF: another parser's line end */
		if (first) {
			h->line = p;
			first = false;
		} else {
			char *sp = strpbrk(p, " \t");
			if (h->n == 128 || !(colon = strchr(p, ':')) || colon == p ||
			    (sp && sp < colon))
				return -1;
			*colon = '\0';
			char *v = colon + 1, *ve = v + strlen(v);
			while (*v == ' ' || *v == '\t')
				v++;
			while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
				*--ve = '\0';
			h->hdr[h->n][0] = p;
			h->hdr[h->n][1] = v;
			h->n++;
			if (ieq(p, "Content-Length")) {
				errno = 0;
				long long n = strtoll(v, NULL, 10);
				/* digits only: "+5" or "5, 5" may be read otherwise
				 * by the other side (a desync) */
				if (!*v || strspn(v, "0123456789") != strlen(v) || errno ||
				    (h->clen >= 0 && h->clen != n))
					h->bad = true;
				h->clen = n;
			} else if (ieq(p, "Transfer-Encoding")) {
				/* chunked alone, once: "gzip, chunked" would pass a
				 * compressed body on unscanned, "xchunked" or a
				 * repeat is framed differently by the other side */
				if (!ieq(v, "chunked") || h->chunked)
					h->bad = true;
				h->chunked = true;
			} else if (ieq(p, "Host")) {
				h->host = v;
				h->n_host++;
			} else if (ieq(p, "Connection") && strcasestr(v, "close")) {
				h->conn_close = true;
			} else if (ieq(p, "Content-Encoding") && !ieq(v, "identity")) {
				h->encoding = v;
			}
		}
		p = eol + 2;
	}
	if (!h->line || (h->chunked && h->clen >= 0))
		h->bad = true; /* both framings: a smuggling attempt */
	return 0;
}

static bool hop_or_stripped(const char *name)
{
	static const char *const drop[] = {
		"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
		"TE",	      "Upgrade",    "Expect",		"Accept-Encoding"};
	for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
		if (ieq(name, drop[i]))
			return true;
	return false;
}

static void repl_out(struct repl *r, const struct mitm_tag *t)
{
	/* every value of the session back to its placeholder */
	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < t->n && i < 64; i++) {
		r->from[r->n] = t->s[i].value;
		r->flen[r->n] = strlen(t->s[i].value);
		r->to[r->n] = t->s[i].placeholder;
		r->tlen[r->n] = strlen(t->s[i].placeholder);
		if (r->flen[r->n] > r->maxf)
			r->maxf = r->flen[r->n];
		r->n++;
	}
}

static void repl_in(struct repl *r, const struct mitm_conn *mc)
{
	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < mc->n_use; i++) {
		r->from[r->n] = mc->use[i]->placeholder;
		r->flen[r->n] = strlen(mc->use[i]->placeholder);
		r->to[r->n] = mc->use[i]->value;
		r->tlen[r->n] = strlen(mc->use[i]->value);
		r->n++;
	}
}

/* An error answer to the client, closing the connection. */
void sbx_mitm_answer(struct mitm_conn *mc, const char *status, const char *why)
{
	char msg[700];
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\nsbx proxy: %s\n",
			 status, strlen(why) + 12, why);
	if (n > 0 && (size_t)n < sizeof(msg))
		sbx_mside_write(&mc->c, msg, (size_t)n);
}

static void answer(struct mitm_conn *mc, const char *status, const char *why)
{
	sbx_mitm_answer(mc, status, why);
	sbx_mitm_logf(mc->m, "failed %s:%u (secret): %s %s", mc->name, mc->port, status, why);
}

/* Whether a (n bytes: a Host header, an absolute URL's authority) names
 * the tunnel's own host (and port, when it has one). */
static bool authority_is_ours(const struct mitm_conn *mc, const char *a, size_t n)
{
	const char *end = a + n, *host = a, *port = NULL;
	size_t hl;

	if (n && a[0] == '[') { /* [v6]:port */
		const char *rb = memchr(a, ']', n);
		if (!rb || (rb + 1 < end && rb[1] != ':'))
			return false;
		host = a + 1;
		hl = (size_t)(rb - host);
		port = rb + 1 < end ? rb + 2 : NULL;
	} else {
		const char *colon = memchr(a, ':', n);
		hl = colon ? (size_t)(colon - a) : n;
		port = colon ? colon + 1 : NULL;
	}
	if (hl != strlen(mc->name) || strncasecmp(host, mc->name, hl))
		return false;
	if (port) {
		size_t pl = (size_t)(end - port);
		unsigned v = 0;
		if (!pl || pl > 5)
			return false;
		for (size_t i = 0; i < pl; i++) {
			if (port[i] < '0' || port[i] > '9')
				return false;
			v = v * 10 + (unsigned)(port[i] - '0');
		}
		return v == mc->port;
	}
	return true;
}

/* The request head, rewritten for the upstream, into out.  Returns 0, -1
 * when malformed, -2 when it names another host than the tunnel's: the
 * value goes only where the allow-list's decision (the CONNECT target)
 * went, never where a Host header or an absolute URL routes on a shared
 * front end. */
static int rewrite_request(struct mitm_conn *mc, struct head *h, bool close_after, struct sbuf *out)
{
	struct repl r;
	char *sp1 = strchr(h->line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	const char *target;

	if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7))
		return -1;
	*sp1 = *sp2 = '\0';
	target = sp1 + 1;
	if (mc->tls) {
		/* origin-form ("*" for OPTIONS) only: an absolute-form or a
		 * "//host/" target names a host of its own */
		if ((target[0] != '/' || target[1] == '/') && strcmp(target, "*"))
			return -2;
	} else { /* absolute-form from a proxy client: origin-form upstream */
		if (strncasecmp(target, "http://", 7))
			return -1;
		size_t al = strcspn(target + 7, "/?#");
		if (!authority_is_ours(mc, target + 7, al))
			return -2;
		target += 7 + al;
		if (!*target)
			target = "/";
		else if (*target != '/')
			return -1;
	}
	if (h->n_host > 1 || (h->host && !authority_is_ours(mc, h->host, strlen(h->host))))
		return -2;
	repl_in(&r, mc);
	sb_str(out, h->line);
	sb_str(out, " ");
	sb_replaced(out, &r, target, strlen(target));
	sb_str(out, " HTTP/1.1\r\n");
	if (!h->host) { /* not left to the upstream's default host */
		char host[300];
		bool v6 = strchr(mc->name, ':') != NULL;
		snprintf(host, sizeof(host), "Host: %s%s%s", v6 ? "[" : "", mc->name,
			 v6 ? "]" : "");
		sb_str(out, host);
		if (mc->port != (mc->tls ? 443 : 80)) {
			snprintf(host, sizeof(host), ":%u", mc->port);
			sb_str(out, host);
		}
		sb_str(out, "\r\n");
	}
	for (size_t i = 0; i < h->n; i++) {
		const char *name = h->hdr[i][0];
		bool ours = hop_or_stripped(name);
		for (size_t k = 0; k < mc->n_use && !ours; k++)
			ours = mc->use[k]->header && ieq(mc->use[k]->header, name);
		if (ours)
			continue;
		sb_str(out, name);
		sb_str(out, ": ");
		sb_replaced(out, &r, h->hdr[i][1], strlen(h->hdr[i][1]));
		sb_str(out, "\r\n");
	}
	sb_str(out, "Accept-Encoding: identity\r\n");
	for (size_t k = 0; k < mc->n_use; k++)
		if (mc->use[k]->header) {
			sb_str(out, mc->use[k]->header);
			sb_str(out, ": ");
			sb_str(out, mc->use[k]->hval);
			sb_str(out, "\r\n");
		}
	if (close_after)
		sb_str(out, "Connection: close\r\n");
	sb_str(out, "\r\n");
	return out->oom ? -1 : 0;
}

/* One response (after any 1xx) from the upstream to the client.  Returns
 * 1: the connection may carry another request, 0: close it. */
static int relay_response(struct mitm_conn *mc, bool head_req, bool client11, bool close_after)
{
	struct repl r;
	struct head h;
	struct sbuf out = {0};
	int status;
	long hl;

	for (;;) {
		if ((hl = read_head(&mc->u)) <= 0) {
			answer(mc, "502 Bad Gateway", "the upstream closed without a response");
			return 0;
		}
		char *text = mc->u.buf + mc->u.off;
		if (parse_head(text, (size_t)hl, &h) < 0 || h.bad ||
		    sscanf(h.line, "HTTP/1.%*d %d", &status) != 1) {
			answer(mc, "502 Bad Gateway", "malformed response from the upstream");
			return 0;
		}
		mc->u.off += (size_t)hl;
		if (status >= 200 || status == 101)
			break;
		/* 1xx (Expect is dropped, so no 100): not passed on */
	}
	if (status == 101) {
		answer(mc, "502 Bad Gateway", "the upstream switched protocols (not relayed)");
		return 0;
	}
	bool body = !head_req && status != 204 && status != 304;
	if (body && h.encoding) {
		answer(mc, "502 Bad Gateway",
		       "the upstream sent a compressed response, which cannot be scanned for "
		       "the secret");
		return 0;
	}
	bool until_close = body && !h.chunked && h.clen < 0;
	bool out_chunked = body && client11;
	bool done_after = close_after || h.conn_close || until_close || (body && !client11);
	struct sbuf raw = {0};
	sb_str(&raw, h.line);
	sb_str(&raw, "\r\n");
	for (size_t i = 0; i < h.n; i++) {
		const char *name = h.hdr[i][0];
		if (ieq(name, "Connection") || ieq(name, "Keep-Alive") ||
		    (body && (ieq(name, "Content-Length") || ieq(name, "Transfer-Encoding"))))
			continue;
		sb_str(&raw, name);
		sb_str(&raw, ": ");
		sb_str(&raw, h.hdr[i][1]);
		sb_str(&raw, "\r\n");
	}
	if (out_chunked)
		sb_str(&raw, "Transfer-Encoding: chunked\r\n");
	if (done_after)
		sb_str(&raw, "Connection: close\r\n");
	sb_str(&raw, "\r\n");
	/* the whole head at once: a value echoed in a header's name (or
	 * across name and value) is replaced too */
	repl_out(&r, mc->t);
	if (raw.oom)
		out.oom = true;
	else
		sb_replaced(&out, &r, raw.p, raw.len);
	sb_free(&raw);
	if (out.oom || sbx_mside_write(&mc->c, out.p, out.len) < 0) {
		sb_free(&out);
		return 0;
	}
	sb_free(&out);
	if (!body)
		return !done_after;
	struct sink k = {&mc->c, out_chunked, &r, &mc->m->bytes_down, mc->m};
	int rc = h.chunked     ? copy_chunked(&mc->u, &k)
		 : until_close ? copy_n(&mc->u, UINT64_MAX, &k)
			       : copy_n(&mc->u, (uint64_t)h.clen, &k);
	if (rc == 0)
		rc = sink_end(&k);
	if (r.held)
		explicit_bzero(r.held, r.hlen);
	free(r.held);
	return rc == 0 && !done_after;
}

/* One request and its response.  Returns 1 to go on, 0 to close. */
static int one_request(struct mitm_conn *mc)
{
	struct head h;
	struct sbuf out = {0};
	long hl = read_head(&mc->c);
	int rc;

	if (hl == 0)
		return 0;
	if (hl == -2)
		answer(mc, "431 Request Header Fields Too Large",
		       "request head larger than 64 KiB");
	if (hl < 0)
		return 0;
	char *text = mc->c.buf + mc->c.off;
	mc->c.off += (size_t)hl;
	if (parse_head(text, (size_t)hl, &h) < 0 || h.bad) {
		answer(mc, "400 Bad Request", "malformed request head");
		return 0;
	}
	bool head_req = !strncmp(h.line, "HEAD ", 5);
	bool client11 = strstr(h.line, " HTTP/1.1") != NULL;
	bool close_after = !mc->tls || h.conn_close || !client11;
	if ((rc = rewrite_request(mc, &h, close_after, &out)) < 0) {
		sb_free(&out);
		if (rc == -2)
			answer(mc, "421 Misdirected Request",
			       "the Host header or request target names another host than the "
			       "tunnel's");
		else
			answer(mc, "400 Bad Request", "malformed request line");
		return 0;
	}
	/* the body keeps its framing (its length header is copied as sent) */
	struct sink k = {&mc->u, h.chunked, NULL, &mc->m->bytes_up, mc->m};
	rc = sbx_mside_write(&mc->u, out.p, out.len);
	sb_free(&out);
	if (rc < 0 || (h.chunked ? copy_chunked(&mc->c, &k) || sink_end(&k)
				 : h.clen > 0 && copy_n(&mc->c, (uint64_t)h.clen, &k))) {
		answer(mc, "502 Bad Gateway", "the request could not be passed on");
		return 0;
	}
	return relay_response(mc, head_req, client11, close_after);
}

void sbx_mitm_serve(struct mitm_conn *mc)
{
	while (one_request(mc) > 0)
		;
}
