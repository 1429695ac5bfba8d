/*
 * listen.c: the listening socket (TCP "HOST:PORT", IPv4 or "[v6]:PORT",
 * or "unix:/path"), TLS with ALPN h2 and http/1.1 when given a
 * certificate; accepted connections go to the front (front.c).  Plain TCP
 * (h2c with prior knowledge, or HTTP/1.1) is refused on a non-loopback
 * address unless --insecure.  The hidden --no-front (benchmarks only:
 * what the front costs, in one run) gives h2o the accepted sockets
 * directly, unguarded; it is refused unless plain text on loopback.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "front.h"

static const h2o_iovec_t alpn_protos[] = {{H2O_STRLIT("h2")}, {H2O_STRLIT("http/1.1")}, {NULL, 0}};

/* --no-front: accept onto the main loop as sbxd did before the front. */
static h2o_socket_t *unguarded;

static void on_accept_unguarded(h2o_socket_t *listener, const char *err)
{
	sbx_srv *S = listener->data;
	h2o_socket_t *sock;

	if (err)
		return;
	for (int i = 0; i < 64; i++) {
		if ((sock = h2o_evloop_socket_accept(listener)) == NULL)
			return;
		h2o_accept(&S->accept_ctx, sock);
	}
}

static void start_unguarded(sbx_srv *S, int fd)
{
	sbx_srv_log(SRV_LOG_WARN, "event=no_front note=\"unguarded: benchmarks only\"");
	unguarded = h2o_evloop_socket_create(S->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
	unguarded->data = S;
	h2o_socket_read_start(unguarded, on_accept_unguarded);
}

static int parse_inet(const char *spec, struct sockaddr_storage *ss, socklen_t *len, bool *loopback,
		      sbx_err *err)
{
	char host[128];
	const char *colon, *hs = spec;
	size_t hl;
	char *end;
	long port;

	if (spec[0] == '[') {
		const char *rb = strchr(spec, ']');
		if (!rb || rb[1] != ':')
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "--listen %s: expected [ADDR]:PORT", spec);
		hs = spec + 1;
		hl = (size_t)(rb - hs);
		colon = rb + 1;
	} else {
		colon = strrchr(spec, ':');
		if (!colon)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "--listen %s: expected HOST:PORT or unix:/path", spec);
		hl = (size_t)(colon - spec);
	}
	if (hl == 0 || hl >= sizeof(host))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "--listen %s: bad address",
				   spec);
	memcpy(host, hs, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (*end || port < 0 || port > 65535 || colon[1] == '\0')
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "--listen %s: bad port", spec);
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		*len = sizeof(*in4);
		*loopback = (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
	} else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		*loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
	} else {
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "--listen %s: %s is not a numeric IPv4/IPv6 address", spec,
				   host);
	}
	return 0;
}

static int setup_tls(sbx_srv *S, SSL_CTX **out, sbx_err *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	if (!ctx)
		return sbx_err_set(err, SBX_E_EXECUTION, 0, "SSL_CTX_new failed");
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	if (SSL_CTX_use_certificate_chain_file(ctx, S->tls_cert) != 1) {
		SSL_CTX_free(ctx);
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "--tls-cert %s: cannot load it",
				   S->tls_cert);
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, S->tls_key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		SSL_CTX_free(ctx);
		return sbx_err_set(
			err, SBX_E_INVALID_ARGUMENT, 0,
			"--tls-key %s: cannot load it or it does not match the certificate",
			S->tls_key);
	}
	h2o_ssl_register_alpn_protocols(ctx, alpn_protos);
	/* The front does the handshake; h2o only ever sees plaintext. */
	*out = ctx;
	return 0;
}

int sbx_srv_listen_start(sbx_srv *S, sbx_err *err)
{
	int fd = -1, one = 1;
	SSL_CTX *tls = NULL;
	bool loopback = false;

	if ((S->tls_cert == NULL) != (S->tls_key == NULL))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "--tls-cert and --tls-key go together");
	if (S->tls_cert && setup_tls(S, &tls, err) != 0)
		return -1;
	if (!strncmp(S->listen, "unix:", 5)) {
		struct sockaddr_un sun = {.sun_family = AF_UNIX};
		const char *path = S->listen + 5;
		struct stat st;
		if (strlen(path) == 0 || strlen(path) >= sizeof(sun.sun_path))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "--listen %s: bad unix socket path", S->listen);
		strcpy(sun.sun_path, path);
		/* A stale socket from a killed sbxd: replace it (only a socket). */
		if (lstat(path, &st) == 0) {
			if (!S_ISSOCK(st.st_mode))
				return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
						   "--listen %s: exists and is not a socket",
						   S->listen);
			unlink(path);
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			return sbx_err_set(err, SBX_E_EXECUTION, e, "--listen %s: %s", S->listen,
					   strerror(e));
		}
		chmod(path, 0600);
		S->unix_path = strdup(path);
	} else {
		struct sockaddr_storage ss;
		socklen_t len = 0;
		if (parse_inet(S->listen, &ss, &len, &loopback, err) != 0)
			return -1;
		if (!loopback && !S->tls_cert && !S->insecure)
			return sbx_err_set(
				err, SBX_E_INVALID_ARGUMENT, 0,
				"--listen %s: refusing plain text on a non-loopback address; "
				"give --tls-cert/--tls-key, or --insecure to accept the risk",
				S->listen);
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd >= 0)
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) != 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			return sbx_err_set(err, SBX_E_EXECUTION, e, "--listen %s: %s", S->listen,
					   strerror(e));
		}
	}
	if (S->no_front && (!loopback || S->tls_cert)) {
		close(fd);
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "--no-front is for benchmarks: plain text on loopback only");
	}
	if (listen(fd, SOMAXCONN) != 0) {
		int e = errno;
		close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "listen: %s", strerror(e));
	}
	{
		/* Tell whoever started us where we listen (port 0 picks one). */
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		char addr[INET6_ADDRSTRLEN] = "";
		const char *scheme = S->tls_cert ? "https" : "http";
		if (S->unix_path) {
			printf("sbxd: listening on unix:%s\n", S->unix_path);
		} else if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
			   ss.ss_family == AF_INET) {
			struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &in4->sin_addr, addr, sizeof(addr));
			printf("sbxd: listening on %s://%s:%u\n", scheme, addr,
			       ntohs(in4->sin_port));
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
			printf("sbxd: listening on %s://[%s]:%u\n", scheme, addr,
			       ntohs(in6->sin6_port));
		}
		fflush(stdout);
	}
	if (S->no_front) {
		start_unguarded(S, fd);
		S->listening = true;
		return 0;
	}
	/* The front's thread accepts from here on. */
	if (sbx_front_start(S, fd, tls, err) != 0) {
		close(fd);
		return -1;
	}
	S->listening = true;
	return 0;
}

void sbx_srv_listen_stop(sbx_srv *S)
{
	if (S->listening) {
		if (unguarded) {
			h2o_socket_read_stop(unguarded);
			h2o_socket_close(unguarded);
			unguarded = NULL;
		} else {
			sbx_front_stop();
		}
		S->listening = false;
	}
	if (S->unix_path) {
		unlink(S->unix_path);
		free(S->unix_path);
		S->unix_path = NULL;
	}
}
