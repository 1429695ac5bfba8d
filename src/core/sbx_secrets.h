/*
 * sbx_secrets.h: secrets the sandbox never sees.  The allow-list proxy
 * (sbx_proxy.h) terminates TLS for the hosts a secret belongs to, with a
 * leaf certificate signed by a per-session CA, and swaps the session's
 * placeholder for the real value on the way out (and the value for the
 * placeholder on the way back).  Every other host is relayed untouched.
 *
 * The CA is made by the host (sbx_proxy_ca_new) before the session's
 * proxy runs, so its certificate can go into the sandbox's trust bundle;
 * its private key stays in this process (and in a proxy child forked from
 * it), never on disk.
 */
#ifndef SBX_SECRETS_H
#define SBX_SECRETS_H

#include <stdbool.h>
#include <stddef.h>

#include "sbx.h"
#include "sbx_proxy.h"

typedef struct sbx_proxy_ca sbx_proxy_ca;

/* A fresh CA (EC P-256, valid 30 days) whose subject names label. */
sbx_proxy_ca *sbx_proxy_ca_new(const char *label, sbx_err *err);
/* Its certificate, PEM (owned by ca). */
const char *sbx_proxy_ca_pem(const sbx_proxy_ca *ca);
void sbx_proxy_ca_free(sbx_proxy_ca *ca);

typedef struct sbx_proxy_secret {
	const char *placeholder; /* what the sandbox sees (>= 8 bytes) */
	const char *value;	 /* what the host gets */
	/* Set this header on every request to the host (a client's own
	 * is dropped), with format's "%s" replaced by the value; NULL: only
	 * replace the placeholder wherever it appears in the request head. */
	const char *header;
	const char *format;	  /* NULL: "%s" */
	const char *const *hosts; /* exact names, or "*.example.com" */
	size_t n_hosts;
	bool insecure_http; /* also substitute in plain absolute-form HTTP */
} sbx_proxy_secret;

/* Intercept connections that came in on listeners tagged tag whose target
 * name is one of a secret's hosts.  ca is copied (a reference).
 * upstream_ca_file: the trust store for the real upstreams (NULL: the
 * system's).  Replaces what an earlier call set for tag. */
int sbx_proxy_set_secrets(sbx_proxy *p, void *tag, const sbx_proxy_ca *ca,
			  const sbx_proxy_secret *s, size_t n, const char *upstream_ca_file,
			  sbx_err *err);

#endif
