/*
 * proxy_mitm.h: what the secret-interception files share (internal to
 * libsbx).  proxy_ca.c makes certificates, proxy_mitm.c owns the per-tag
 * configuration and the worker threads (one per intercepted connection,
 * blocking I/O: TLS both ways is far simpler that way than on the
 * proxy's non-blocking loop), proxy_mitm_http.c speaks HTTP/1.1 on them.
 */
#ifndef SBX_PROXY_MITM_H
#define SBX_PROXY_MITM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "sbx_secrets.h"

struct conn;

struct mitm_secret {
	char *placeholder, *value;
	char *header; /* NULL: substitute the placeholder only */
	char *hval;   /* format with the value in it */
	char **hosts;
	size_t n_hosts;
	bool insecure_http;
};

struct mitm_leaf {
	char host[256];
	X509 *cert;
	struct mitm_leaf *next;
};

/* What one listener tag intercepts, and how. */
struct mitm_tag {
	void *tag;
	EVP_PKEY *cakey, *leafkey;
	X509 *cacert;
	SSL_CTX *sctx, *cctx; /* toward the sandbox / toward the upstream */
	struct mitm_secret *s;
	size_t n;
	size_t max_value;     /* longest value: what a streaming replace holds back */
	pthread_mutex_t lock; /* leaves */
	struct mitm_leaf *leaves;
	size_t n_leaves;
	uint64_t active; /* its workers (under sbx_mitm.lock) */
	struct mitm_tag *next;
};

/* One side of an intercepted connection: TLS or plain, with read buffer. */
struct mside {
	int fd;
	SSL *ssl;
	char *buf;
	size_t off, len, cap;
};

/* One intercepted connection, served by its own thread. */
struct mitm_conn {
	struct sbx_mitm *m;
	struct mitm_tag *t;
	pthread_t th;
	bool started, done;
	bool tls; /* CONNECT/SOCKS5: terminate TLS; else absolute-form HTTP */
	bool socks;
	char name[256];
	uint16_t port;
	/* the secrets whose placeholder becomes their value here */
	const struct mitm_secret *use[32];
	size_t n_use;
	struct mside c, u;
	struct mitm_conn *next;
};

/* The proxy's interception state (sbx_proxy.mitm). */
struct sbx_mitm {
	pthread_mutex_t lock; /* conns, lines, counters */
	int efd;	      /* eventfd: a thread finished or logged */
	struct mitm_tag *tags;
	struct mitm_conn *conns;
	char **lines;
	size_t n_lines;
	uint64_t active, intercepted, bytes_up, bytes_down;
	uint32_t idle_timeout_ms;
};

/* proxy_ca.c */
void sbx_proxy_ca_ref(const sbx_proxy_ca *ca, EVP_PKEY **key, X509 **cert);
X509 *sbx_proxy_ca_leaf(EVP_PKEY *cakey, X509 *cacert, EVP_PKEY *leafkey, const char *host);

/* proxy_mitm.c */
bool sbx_mitm_host_match(const struct mitm_secret *s, const char *name);
void sbx_mitm_logf(struct sbx_mitm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbx_mitm_count(struct sbx_mitm *m, uint64_t *ctr, uint64_t n);
/* Hand c over to a worker when its target is a secret's host: true when
 * taken (c is closed as far as the proxy is concerned). */
bool sbx_proxy_mitm_take(struct conn *c);
/* The eventfd is readable: join finished workers, pass their log lines. */
void sbx_proxy_mitm_reap(struct sbx_proxy *p);
void sbx_proxy_mitm_remove(struct sbx_proxy *p, void *tag);
void sbx_proxy_mitm_free(struct sbx_proxy *p);
void sbx_proxy_mitm_stats(const struct sbx_proxy *p, sbx_proxy_stats *st);

/* proxy_mitm_http.c: serve HTTP/1.1 requests until either side ends. */
void sbx_mitm_serve(struct mitm_conn *mc);
int sbx_mside_write(struct mside *s, const void *b, size_t n);
/* An error answer ("502 Bad Gateway", why) to the client. */
void sbx_mitm_answer(struct mitm_conn *mc, const char *status, const char *why);

#endif
