/*
 * proto.c: messages with fds over the SOCK_SEQPACKET sockets of a session:
 * offers and the ready message (sbx_proto_send_fds / recv_fds), and one run
 * request (header + payload + the four stdio/status fds).  The host sends it
 * to the zygote, the zygote passes it to a waiting sbx-init, and init to
 * its workload: one format, one validation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

#define NFDS 4
/* Most fds one control message carries. */
#define MAX_FDS SBX_PROTO_MAX_FDS

static int send_iov(int sock, struct iovec *iov, size_t niov, const int *fds, size_t nfds)
{
	union {
		char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh;
	ssize_t n;

	if (nfds > MAX_FDS) {
		errno = EINVAL;
		return -1;
	}
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = niov;
	if (nfds) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	while ((n = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return n < 0 ? -1 : 0;
}

int sbx_proto_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds)
{
	struct iovec iov = {(void *)buf, len};
	return send_iov(sock, &iov, 1, fds, nfds);
}

ssize_t sbx_proto_recv_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *nfds)
{
	union {
		char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {buf, len};
	struct msghdr mh;
	ssize_t n;

	*nfds = 0;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < cnt; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*nfds < max)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	return n;
}

int sbx_proto_send_run(int sock, const struct sbx_proto_run *req, const char *payload,
		       const int fds[4])
{
	struct iovec iov[2] = {{(void *)req, sizeof(*req)}, {(void *)payload, req->payload_len}};
	return send_iov(sock, iov, 2, fds, NFDS);
}

int sbx_proto_recv_run(int sock, struct sbx_proto_run *req, char *payload, int fds[4])
{
	union {
		char buf[CMSG_SPACE(NFDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov[2] = {{req, sizeof(*req)}, {payload, SBX_PROTO_MAX_PAYLOAD}};
	struct msghdr mh;
	int nfds = 0;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (n == 0)
		return 1;
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 2 : 1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int cnt = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < cnt; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nfds < NFDS)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	if ((size_t)n < sizeof(*req) || req->magic != SBX_PROTO_MAGIC || nfds != NFDS ||
	    req->payload_len != (size_t)n - sizeof(*req) || req->argc == 0 ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || req->payload_len == 0 ||
	    payload[req->payload_len - 1] != '\0') {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return -1;
	}
	return 0;
}
