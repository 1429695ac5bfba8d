/*
 * proxy_mitm.c: secret interception's plumbing: the per-tag configuration
 * (sbx_proxy_set_secrets), handing a connection whose target is a secret's
 * host from the proxy's loop to a worker thread, the TLS handshakes on both
 * sides (the client gets a leaf of the session CA; the upstream is
 * verified against the trust store, name included), and joining finished
 * workers back on the loop (their log lines reach the proxy's log there,
 * on the caller's thread, as every other line does).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>

#include "proxy_internal.h"
#include "proxy_mitm.h"

#define MAX_LEAVES 256
#define MAX_LINES 256
/* Intercepted connections of one listener tag (one session, or one run's
 * own listener) at once: sbxd serves every session's proxy in one process,
 * so max_conns alone would let one sandbox take every worker thread. */
#define MAX_PER_TAG 128

bool sbx_mitm_host_match(const struct mitm_secret *s, const char *name)
{
	size_t nl = strlen(name);

	for (size_t i = 0; i < s->n_hosts; i++) {
		const char *h = s->hosts[i];
		if (h[0] == '*' && h[1] == '.') {
			size_t sl = strlen(h + 1); /* ".example.com" */
			if (nl > sl && !strcasecmp(name + nl - sl, h + 1))
				return true;
		} else if (!strcasecmp(name, h)) {
			return true;
		}
	}
	return false;
}

static void wake(struct sbx_mitm *m)
{
	uint64_t one = 1;
	if (write(m->efd, &one, sizeof(one)) < 0) {
		/* the counter is already non-zero: the loop wakes anyway */
	}
}

void sbx_mitm_logf(struct sbx_mitm *m, const char *fmt, ...)
{
	char line[640];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* Names in a line come from the sandbox (a TLS server name may hold
	 * any byte but NUL): one line stays one line in the log. */
	for (char *c = line; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	pthread_mutex_lock(&m->lock);
	if (m->n_lines < MAX_LINES) {
		char **nl = realloc(m->lines, (m->n_lines + 1) * sizeof(*nl));
		if (nl) {
			m->lines = nl;
			if ((nl[m->n_lines] = strdup(line)))
				m->n_lines++;
		}
	}
	pthread_mutex_unlock(&m->lock);
	wake(m);
}

void sbx_mitm_count(struct sbx_mitm *m, uint64_t *ctr, uint64_t n)
{
	pthread_mutex_lock(&m->lock);
	*ctr += n;
	pthread_mutex_unlock(&m->lock);
}

/* ---- configuration ---- */

/* A string that held the value, cleared before it goes back to malloc. */
static void free_cleared(char *s)
{
	if (s)
		explicit_bzero(s, strlen(s));
	free(s);
}

static void secret_free(struct mitm_secret *s)
{
	free(s->placeholder);
	free_cleared(s->value);
	free(s->header);
	free_cleared(s->hval);
	for (size_t i = 0; i < s->n_hosts; i++)
		free(s->hosts[i]);
	free(s->hosts);
}

static void tag_free(struct mitm_tag *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		secret_free(&t->s[i]);
	free(t->s);
	while (t->leaves) {
		struct mitm_leaf *l = t->leaves;
		t->leaves = l->next;
		X509_free(l->cert);
		free(l);
	}
	SSL_CTX_free(t->sctx);
	SSL_CTX_free(t->cctx);
	EVP_PKEY_free(t->cakey);
	EVP_PKEY_free(t->leafkey);
	X509_free(t->cacert);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* "%s" in format becomes the value (once; no other conversions). */
static char *format_value(const char *format, const char *value)
{
	const char *f = format ? format : "%s", *at = strstr(f, "%s");
	char *out;

	if (!at || strstr(at + 2, "%s"))
		return NULL;
	if (asprintf(&out, "%.*s%s%s", (int)(at - f), f, value, at + 2) < 0)
		return NULL;
	return out;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char h1[] = "\x08http/1.1";
	(void)ssl;
	(void)arg;
	/* HTTP/1.1 only: a client that offers h2 falls back to it. */
	if (SSL_select_next_proto((unsigned char **)out, outlen, h1, sizeof(h1) - 1, in, inlen) ==
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_OK;
	return SSL_TLSEXT_ERR_NOACK;
}

static bool bad_text(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return !s;
}

static int tag_fill(struct mitm_tag *t, const sbx_proxy_secret *s, size_t n, const char *cafile,
		    sbx_err *err)
{
	static const unsigned char h1[] = "\x08http/1.1";

	if (!(t->s = calloc(n ? n : 1, sizeof(*t->s))))
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "secrets: out of memory");
	t->n = n;
	for (size_t i = 0; i < n; i++) {
		struct mitm_secret *d = &t->s[i];
		if (!s[i].placeholder || strlen(s[i].placeholder) < 8 || !s[i].value ||
		    !s[i].value[0] || bad_text(s[i].placeholder) || bad_text(s[i].value) ||
		    (s[i].header && (!s[i].header[0] || bad_text(s[i].header))) ||
		    (s[i].format && bad_text(s[i].format)) || !s[i].n_hosts)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "secrets: secret %zu needs a placeholder (8+ bytes), "
					   "a value, hosts, and no control characters",
					   i + 1);
		d->insecure_http = s[i].insecure_http;
		if (!(d->placeholder = strdup(s[i].placeholder)) ||
		    !(d->value = strdup(s[i].value)) ||
		    !(d->hosts = calloc(s[i].n_hosts, sizeof(char *))))
			return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "secrets: out of memory");
		for (size_t k = 0; k < s[i].n_hosts; k++, d->n_hosts++)
			if (!s[i].hosts[k] || !(d->hosts[k] = strdup(s[i].hosts[k])))
				return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
						   "secrets: secret %zu: bad host", i + 1);
		if (s[i].header) {
			if (!(d->header = strdup(s[i].header)) ||
			    !(d->hval = format_value(s[i].format, s[i].value)))
				return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
						   "secrets: secret %zu: format must hold "
						   "exactly one %%s",
						   i + 1);
		}
		if (strlen(d->value) > t->max_value)
			t->max_value = strlen(d->value);
	}
	if (!(t->leafkey = EVP_EC_gen("P-256")) || !(t->sctx = SSL_CTX_new(TLS_server_method())) ||
	    !(t->cctx = SSL_CTX_new(TLS_client_method())))
		return sbx_err_set(err, SBX_E_EXECUTION, 0, "secrets: cannot set up TLS");
	SSL_CTX_set_min_proto_version(t->sctx, TLS1_2_VERSION);
	SSL_CTX_set_alpn_select_cb(t->sctx, alpn_select, NULL);
	SSL_CTX_set_min_proto_version(t->cctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->cctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_alpn_protos(t->cctx, h1, sizeof(h1) - 1);
	if (cafile ? SSL_CTX_load_verify_locations(t->cctx, cafile, NULL) != 1
		   : SSL_CTX_set_default_verify_paths(t->cctx) != 1)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "secrets: cannot load the upstream trust store %s",
				   cafile ? cafile : "(system default)");
	return 0;
}

int sbx_proxy_set_secrets(sbx_proxy *p, void *tag, const sbx_proxy_ca *ca,
			  const sbx_proxy_secret *s, size_t n, const char *upstream_ca_file,
			  sbx_err *err)
{
	struct mitm_tag *t;
	struct sbx_mitm *m;

	if (!p || !ca || (n && !s))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "sbx_proxy_set_secrets: needs a proxy and a CA");
	if (n > 64)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "secrets: at most 64 per session");
	if (!p->mitm) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->mev};
		if (!(m = calloc(1, sizeof(*m))))
			return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "secrets: out of memory");
		pthread_mutex_init(&m->lock, NULL);
		m->idle_timeout_ms = p->cfg.idle_timeout_ms;
		if ((m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
		    epoll_ctl(p->epfd, EPOLL_CTL_ADD, m->efd, &ev) < 0) {
			int e = errno;
			if (m->efd >= 0)
				close(m->efd);
			free(m);
			return sbx_err_set(err, SBX_E_EXECUTION, e, "secrets: eventfd: %s",
					   strerror(e));
		}
		p->mev = (struct evh){EV_MITM, NULL};
		p->mitm = m;
	}
	m = p->mitm;
	if (!(t = calloc(1, sizeof(*t))))
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "secrets: out of memory");
	pthread_mutex_init(&t->lock, NULL);
	t->tag = tag;
	sbx_proxy_ca_ref(ca, &t->cakey, &t->cacert);
	if (tag_fill(t, s, n, upstream_ca_file, err) < 0) {
		ERR_clear_error();
		tag_free(t);
		return -1;
	}
	sbx_proxy_mitm_remove(p, tag); /* an earlier configuration, and its workers */
	t->next = m->tags;
	m->tags = t;
	return 0;
}

/* ---- the workers ---- */

static X509 *leaf_for(struct mitm_tag *t, const char *host)
{
	struct mitm_leaf *l;
	X509 *x = NULL;

	pthread_mutex_lock(&t->lock);
	for (l = t->leaves; l; l = l->next)
		if (!strcmp(l->host, host)) {
			X509_up_ref(l->cert);
			x = l->cert;
			break;
		}
	pthread_mutex_unlock(&t->lock);
	if (x || !(x = sbx_proxy_ca_leaf(t->cakey, t->cacert, t->leafkey, host)))
		return x;
	pthread_mutex_lock(&t->lock);
	if (t->n_leaves < MAX_LEAVES && (l = calloc(1, sizeof(*l)))) {
		snprintf(l->host, sizeof(l->host), "%s", host);
		X509_up_ref(x);
		l->cert = x;
		l->next = t->leaves;
		t->leaves = l;
		t->n_leaves++;
	}
	pthread_mutex_unlock(&t->lock);
	return x;
}

static const char *ssl_why(char *b, size_t n)
{
	unsigned long e = ERR_get_error();
	if (e)
		ERR_error_string_n(e, b, n);
	else
		snprintf(b, n, "%s", errno ? strerror(errno) : "connection closed");
	ERR_clear_error();
	return b;
}

/* Both TLS handshakes.  Returns 0, or -1 (logged; the client told when it
 * can be). */
static int handshakes(struct mitm_conn *mc)
{
	static const char ok200[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	static const uint8_t ok5[10] = {5, 0, 0, 1};
	struct mitm_tag *t = mc->t;
	char why[256], msg[400];
	X509 *leaf;
	const char *sni;

	if (send(mc->c.fd, mc->socks ? (const void *)ok5 : ok200,
		 mc->socks ? sizeof(ok5) : sizeof(ok200) - 1, MSG_NOSIGNAL) <= 0)
		return -1;
	if (!(leaf = leaf_for(t, mc->name))) {
		sbx_mitm_logf(mc->m, "failed %s:%u (secret): cannot make a certificate", mc->name,
			      mc->port);
		return -1;
	}
	mc->c.ssl = SSL_new(t->sctx);
	if (!mc->c.ssl || !SSL_set_fd(mc->c.ssl, mc->c.fd) ||
	    !SSL_use_certificate(mc->c.ssl, leaf) || !SSL_use_PrivateKey(mc->c.ssl, t->leafkey) ||
	    SSL_accept(mc->c.ssl) != 1) {
		X509_free(leaf);
		sbx_mitm_logf(mc->m, "failed %s:%u (secret): TLS with the client: %s", mc->name,
			      mc->port, ssl_why(why, sizeof(why)));
		return -1;
	}
	X509_free(leaf);
	sni = SSL_get_servername(mc->c.ssl, TLSEXT_NAMETYPE_host_name);
	if (sni && strcasecmp(sni, mc->name)) {
		/* The tunnel's decision was about mc->name: TLS for another
		 * name through it is not what was allowed. */
		snprintf(msg, sizeof(msg), "TLS server name %.200s is not the CONNECT target", sni);
		sbx_mitm_logf(mc->m, "refused %s:%u (secret): %s", mc->name, mc->port, msg);
		sbx_mitm_answer(mc, "403 Forbidden", msg);
		return -1;
	}
	mc->u.ssl = SSL_new(t->cctx);
	unsigned char a[16];
	bool ip = inet_pton(AF_INET, mc->name, a) == 1 || inet_pton(AF_INET6, mc->name, a) == 1;
	if (!mc->u.ssl || !SSL_set_fd(mc->u.ssl, mc->u.fd) ||
	    (ip ? !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(mc->u.ssl), mc->name)
		: (!SSL_set_tlsext_host_name(mc->u.ssl, mc->name) ||
		   !SSL_set1_host(mc->u.ssl, mc->name))) ||
	    SSL_connect(mc->u.ssl) != 1) {
		long vr = mc->u.ssl ? SSL_get_verify_result(mc->u.ssl) : X509_V_OK;
		if (vr != X509_V_OK)
			snprintf(why, sizeof(why), "certificate verify failed: %s",
				 X509_verify_cert_error_string(vr));
		else
			ssl_why(why, sizeof(why));
		snprintf(msg, sizeof(msg), "TLS with the upstream: %s", why);
		sbx_mitm_logf(mc->m, "failed %s:%u (secret): %s", mc->name, mc->port, msg);
		sbx_mitm_answer(mc, "502 Bad Gateway", msg);
		return -1;
	}
	return 0;
}

static void *worker(void *arg)
{
	struct mitm_conn *mc = arg;
	struct timeval tv = {.tv_sec = mc->m->idle_timeout_ms / 1000,
			     .tv_usec = (mc->m->idle_timeout_ms % 1000) * 1000};
	int fds[2] = {mc->c.fd, mc->u.fd};

	for (int i = 0; i < 2; i++) {
		int fl = fcntl(fds[i], F_GETFL);
		fcntl(fds[i], F_SETFL, fl & ~O_NONBLOCK);
		setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (!mc->tls || handshakes(mc) == 0)
		sbx_mitm_serve(mc);
	ERR_clear_error();
	pthread_mutex_lock(&mc->m->lock);
	mc->done = true;
	pthread_mutex_unlock(&mc->m->lock);
	wake(mc->m);
	return NULL;
}

bool sbx_proxy_mitm_take(struct conn *c)
{
	sbx_proxy *p = c->p;
	struct sbx_mitm *m = p->mitm;
	struct mitm_tag *t;
	struct mitm_conn *mc;
	size_t rest = c->hlen - c->req.head_len;
	const char *name = c->name[0] ? c->name : c->host;

	if (!m)
		return false;
	for (t = m->tags; t && t->tag != c->tag; t = t->next)
		;
	if (!t || !(mc = calloc(1, sizeof(*mc))))
		return false;
	mc->tls = c->mode != M_FORWARD;
	for (size_t i = 0; i < t->n && mc->n_use < 32; i++)
		if (sbx_mitm_host_match(&t->s[i], name) && (mc->tls || t->s[i].insecure_http))
			mc->use[mc->n_use++] = &t->s[i];
	if (!mc->n_use) {
		free(mc);
		return false; /* not a secret's host: relayed as ever */
	}
	pthread_mutex_lock(&m->lock);
	bool full = m->active >= p->cfg.max_conns, tag_full = t->active >= MAX_PER_TAG;
	pthread_mutex_unlock(&m->lock);
	if (full || tag_full) { /* a thread each: bounded like the proxy's connections */
		free(mc);
		sbx_proxy_conn_fail(
			c, 502, 1,
			full ? "too many intercepted connections (max_conns)"
			     : "too many intercepted connections of this session (128)");
		return true;
	}
	if (mc->tls && rest) {
		/* Bytes sent before the tunnel was up would go to TLS we
		 * cannot feed them to: refuse rather than guess. */
		free(mc);
		sbx_proxy_conn_fail(c, 400, 1, "data sent before the tunnel was established");
		return true;
	}
	mc->m = m;
	mc->t = t;
	mc->socks = c->mode == M_SOCKS;
	snprintf(mc->name, sizeof(mc->name), "%s", name);
	mc->port = c->port;
	mc->c.fd = c->cfd;
	mc->u.fd = c->ufd;
	if (!mc->tls) { /* the absolute-form request read so far is read again */
		if (!(mc->c.buf = malloc(c->hlen))) {
			free(mc);
			sbx_proxy_conn_close(c);
			return true;
		}
		memcpy(mc->c.buf, c->head, c->hlen);
		mc->c.len = mc->c.cap = c->hlen;
	}
	epoll_ctl(p->epfd, EPOLL_CTL_DEL, c->cfd, NULL);
	epoll_ctl(p->epfd, EPOLL_CTL_DEL, c->ufd, NULL);
	c->cfd = c->ufd = -1; /* the worker's now */
	pthread_mutex_lock(&m->lock);
	mc->next = m->conns;
	m->conns = mc;
	m->active++;
	t->active++;
	m->intercepted++;
	mc->started = pthread_create(&mc->th, NULL, worker, mc) == 0;
	if (!mc->started)
		mc->done = true;
	pthread_mutex_unlock(&m->lock);
	if (!mc->started)
		wake(m);
	sbx_proxy_conn_close(c);
	return true;
}

/* ---- back on the loop ---- */

static void conn_free(struct sbx_mitm *m, struct mitm_conn *mc)
{
	if (mc->started)
		pthread_join(mc->th, NULL);
	SSL_free(mc->c.ssl);
	SSL_free(mc->u.ssl);
	close(mc->c.fd);
	close(mc->u.fd);
	free(mc->c.buf);
	if (mc->u.buf) /* the upstream's answers may have held the value */
		explicit_bzero(mc->u.buf, mc->u.cap);
	free(mc->u.buf);
	pthread_mutex_lock(&m->lock);
	m->active--;
	mc->t->active--; /* the tag is freed only after its workers */
	pthread_mutex_unlock(&m->lock);
	free(mc);
}

/* Unlink the workers that are done (or, with tag, all of tag's, after
 * telling them to stop) and free them. */
static void collect(sbx_proxy *p, void *tag, bool by_tag)
{
	struct sbx_mitm *m = p->mitm;
	struct mitm_conn *gone = NULL, **pp;
	char **lines;
	size_t n;

	pthread_mutex_lock(&m->lock);
	for (pp = &m->conns; *pp;) {
		struct mitm_conn *mc = *pp;
		if (mc->done || (by_tag && mc->t->tag == tag)) {
			if (!mc->done) { /* wakes its blocking reads and writes */
				shutdown(mc->c.fd, SHUT_RDWR);
				shutdown(mc->u.fd, SHUT_RDWR);
			}
			*pp = mc->next;
			mc->next = gone;
			gone = mc;
		} else {
			pp = &mc->next;
		}
	}
	lines = m->lines;
	n = m->n_lines;
	m->lines = NULL;
	m->n_lines = 0;
	pthread_mutex_unlock(&m->lock);
	while (gone) {
		struct mitm_conn *mc = gone;
		gone = mc->next;
		conn_free(m, mc);
	}
	for (size_t i = 0; i < n; i++) {
		if (p->cfg.log)
			p->cfg.log(p->cfg.ud, lines[i]);
		free(lines[i]);
	}
	free(lines);
}

void sbx_proxy_mitm_reap(sbx_proxy *p)
{
	uint64_t v;

	if (!p->mitm)
		return;
	if (read(p->mitm->efd, &v, sizeof(v)) < 0) {
		/* nothing new */
	}
	collect(p, NULL, false);
}

void sbx_proxy_mitm_remove(sbx_proxy *p, void *tag)
{
	struct mitm_tag **tp;

	if (!p->mitm)
		return;
	collect(p, tag, true);
	for (tp = &p->mitm->tags; *tp;) {
		struct mitm_tag *t = *tp;
		if (t->tag == tag) {
			*tp = t->next;
			tag_free(t);
		} else {
			tp = &t->next;
		}
	}
}

void sbx_proxy_mitm_free(sbx_proxy *p)
{
	struct sbx_mitm *m = p->mitm;

	if (!m)
		return;
	while (m->tags)
		sbx_proxy_mitm_remove(p, m->tags->tag);
	collect(p, NULL, false);
	close(m->efd);
	pthread_mutex_destroy(&m->lock);
	free(m);
	p->mitm = NULL;
}

void sbx_proxy_mitm_stats(const sbx_proxy *p, sbx_proxy_stats *st)
{
	struct sbx_mitm *m = p->mitm;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	st->active += m->active;
	st->bytes_up += m->bytes_up;
	st->bytes_down += m->bytes_down;
	st->intercepted = m->intercepted;
	pthread_mutex_unlock(&m->lock);
}
