/*
 * proxy_parse.h: the pure parsers of the allow-list proxy (proxy_parse.c).
 *
 * Everything here reads untrusted bytes a sandboxed client sent and does no
 * I/O: the HTTP/1.x request head (CONNECT authority-form, absolute-form
 * http:// URIs), the rewrite of a forwarded request's head, and the SOCKS5
 * greeting and CONNECT request.  proxy.c does the rest.  Internal to libsbx
 * (and to tests/unit/test_proxy_parse.c and tests/fuzz/fuzz_proxy.c).
 */
#ifndef SBX_PROXY_PARSE_H
#define SBX_PROXY_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbx_proxy.h"

/* A request head larger than this is refused with 431. */
#define SBX_PROXY_HEAD_MAX 16384
/* ... and so is one with more header fields than this. */
#define SBX_PROXY_MAX_HEADERS 100
#define SBX_PROXY_HOST_MAX 255

/* Parser results. */
#define SBX_PP_INCOMPLETE 0 /* need more bytes */
#define SBX_PP_OK 1	    /* parsed; see the struct */
#define SBX_PP_ERROR (-1)   /* refuse: status / reason (HTTP) or reply (SOCKS5) */

typedef struct sbx_proxy_hdr {
	uint16_t name_off, name_len; /* offsets into the head buffer */
	uint16_t val_off, val_len;   /* value without surrounding blanks */
} sbx_proxy_hdr;

typedef struct sbx_proxy_http_req {
	/* on SBX_PP_ERROR: the status to answer (400, 431, 501) and why */
	int status;
	const char *reason;		   /* static string */
	bool connect;			   /* CONNECT host:port, else absolute-form */
	char host[SBX_PROXY_HOST_MAX + 1]; /* as sent; IPv6 without brackets */
	uint16_t port;
	uint16_t method_len;			    /* the method is buf[0..method_len) */
	uint16_t path_off, path_len;		    /* absolute-form: origin-form target
	                               * (path_len 0 means "/") */
	int minor;				    /* HTTP/1.<minor> */
	size_t head_len;			    /* bytes of the head, final CRLF included */
	int64_t content_length;			    /* -1: none */
	bool has_host;				    /* a Host field was present ... */
	char host_hdr_host[SBX_PROXY_HOST_MAX + 1]; /* ... naming this host */
	uint16_t host_hdr_port;			    /* ... and port (default 80) */
	size_t n_hdrs;
	sbx_proxy_hdr hdrs[SBX_PROXY_MAX_HEADERS];
} sbx_proxy_http_req;

/*
 * Parse the request head at the start of buf[0..len).  Strict: lines end
 * in CRLF (a bare CR or LF is a 400), no NUL bytes, no obsolete line
 * folding, HTTP/1.0 or 1.1 only, one Host and one Content-Length at most.
 * Returns SBX_PP_INCOMPLETE (len < SBX_PROXY_HEAD_MAX and no error so far),
 * SBX_PP_OK (r filled, r->head_len bytes are the head) or SBX_PP_ERROR
 * (r->status, r->reason).  A Transfer-Encoding gives 501; an origin-form or
 * https:// target 400 (a proxy needs a target; https goes through CONNECT).
 * For absolute-form requests, a Host field that names another host or port
 * than the target is a 400.
 */
int sbx_proxy_http_parse(const char *buf, size_t len, sbx_proxy_http_req *r);

/*
 * Write into out[0..cap) the head to send upstream for the absolute-form
 * request r parsed from buf: origin-form request line, every header but
 * Proxy-*, the hop-by-hop ones (Connection, Keep-Alive, TE, Trailer,
 * Transfer-Encoding, Upgrade) and those Connection names, then
 * "Connection: close".  Returns the length, or -1 when cap is too small
 * (2 * SBX_PROXY_HEAD_MAX always suffices).
 */
long sbx_proxy_http_rewrite(const char *buf, const sbx_proxy_http_req *r, char *out, size_t cap);

/*
 * SOCKS5 greeting (VER NMETHODS METHODS...).  SBX_PP_OK with *used bytes
 * consumed and *noauth telling whether method 0 (no authentication, the
 * only one we offer) is on the list; SBX_PP_ERROR when it is not SOCKS5.
 */
int sbx_proxy_socks_greeting(const uint8_t *buf, size_t len, size_t *used, bool *noauth);

typedef struct sbx_proxy_socks_req {
	uint8_t reply;			   /* on SBX_PP_ERROR: the SOCKS5 reply code to send */
	char host[SBX_PROXY_HOST_MAX + 1]; /* name, or inet_ntop of ATYP 1/4 */
	uint16_t port;
	size_t used; /* bytes of the request */
} sbx_proxy_socks_req;

/*
 * SOCKS5 request (VER CMD RSV ATYP DST.ADDR DST.PORT).  CONNECT only (else
 * reply 0x07), ATYP 1, 3 or 4 (else 0x08); a domain name must be 1..255
 * printable bytes without NUL or blanks (else 0x01).
 */
int sbx_proxy_socks_request(const uint8_t *buf, size_t len, sbx_proxy_socks_req *r);

/* Test observability (not part of sbx_proxy.h): how many name lookups the
 * proxy has started since sbx_proxy_new. */
uint64_t sbx_proxy_lookups(const sbx_proxy *p);

#endif
