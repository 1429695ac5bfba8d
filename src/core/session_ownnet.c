/*
 * session_ownnet.c: warm inits for runs with an allow-list of their own.
 *
 * The allowlist namespace of a session is shared by its runs, so the proxy
 * cannot tell one run's connections from another's.  A run that narrows
 * the allow-list therefore gets a network namespace of its own: the zygote
 * makes one on request (SBX_NET_OWN: lo and a proxy listener, netns.c),
 * clones an init into it and offers it like any warm init; the listener
 * comes first on the init's request socket, and the caller serves it with
 * the run's list (sbx_run_take_listener).  Such an init serves one run (it
 * is never given back: its namespace is that run's).
 *
 * The first such run of a session waits for the zygote (a cold start);
 * each one taken asks for the next at once, so one stays ready for the
 * session's next narrowed run.  These offers are outside the count of
 * warm offers (session.c): asking for one never asks for a regular one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session_impl.h"

void sbx_ownnet_keep(sbx_session *s, int sock, int pidfd, sbx_run_cgroup *rc)
{
	if (s->own_pending)
		s->own_pending--;
	if (s->own_spare.sock >= 0) {
		sbx_pool_drop_offer(sock, pidfd, rc);
		return;
	}
	s->own_spare.sock = sock;
	s->own_spare.pidfd = pidfd;
	s->own_spare.rc = *rc;
}

void sbx_ownnet_close(sbx_session *s)
{
	if (s->own_spare.sock >= 0)
		sbx_pool_drop_offer(s->own_spare.sock, s->own_spare.pidfd, &s->own_spare.rc);
	s->own_spare.sock = s->own_spare.pidfd = -1;
}

/* Ask the zygote for one, unless one is ready or asked for already. */
static int ask(sbx_session *s)
{
	if (s->own_spare.sock >= 0 || s->own_pending)
		return 0;
	if (sbx_pool_send_want(s, SBX_NET_OWN) < 0)
		return -1;
	s->own_pending++;
	return 0;
}

static bool usable(const sbx_session *s, sbx_err *err)
{
	if (s->ctl_fd < 0)
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, 0, "the session is closed"), false;
	if (s->pending)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "the session is still setting up (sbx_session_finish first)"),
		       false;
	if (s->none || s->net < SBX_NET_ALLOWLIST)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "a run's own allow-list needs a session whose network_mode is "
				   "allowlist or open (this one's is %s)",
				   sbx_net_name(s->net)),
		       false;
	return true;
}

int sbx_session_own_offer_fd(sbx_session *s)
{
	sbx_err err;
	if (!usable(s, &err) || s->own_spare.sock >= 0 || ask(s) < 0)
		return -1;
	return sbx_pool_unless_ready(s->placer ? sbx_placer_fd(s->placer) : s->ctl_fd);
}

/* The listener the zygote queued ahead of the init's own messages. */
static int take_listener(int sock, sbx_err *err)
{
	char c = 0;
	int fd = -1;
	size_t nfds = 0;
	ssize_t n = sbx_proto_recv_fds(sock, &c, 1, &fd, 1, &nfds);
	if (n == 1 && c == 'L' && nfds == 1)
		return fd;
	if (nfds)
		close(fd);
	return sbx_err_set(err, SBX_E_EXECUTION, EPROTO,
			   "the sandbox's own network for the run came without its listener");
}

int sbx_session_take_own(sbx_session *s, int *sock, int *pidfd, sbx_run_cgroup *rc, int *listener,
			 sbx_err *err)
{
	memset(rc, 0, sizeof(*rc));
	*listener = -1;
	if (!usable(s, err))
		return -1;
	/* One kept past warm_idle_ms expired (init.c): a fresh one. */
	if (s->own_spare.sock >= 0 && sbx_pool_offer_expired(s->own_spare.sock))
		sbx_ownnet_close(s);
	if (ask(s) < 0)
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, errno, "the session has ended");
	/* Offers come in the order asked: regular ones on the way are set
	 * aside for their mode (and replaced), as sbx_pool_take does. */
	while (s->own_spare.sock < 0) {
		sbx_net got = SBX_NET_BLOCKED;
		int rc_ = sbx_pool_recv_offer(s, sock, pidfd, &got, rc, err);
		if (rc_ == -3)
			continue;
		if ((uint32_t)got == SBX_NET_OWN) {
			s->own_pending--;
			if (rc_ < 0)
				return -1;
			s->own_spare.sock = *sock;
			s->own_spare.pidfd = *pidfd;
			s->own_spare.rc = *rc;
			break;
		}
		if (rc_ < 0) {
			int e = errno;
			if (rc_ == -2)
				(void)sbx_pool_send_want(s, got);
			errno = e;
			return -1;
		}
		(void)sbx_pool_send_want(s, got);
		if (got < SBX_NET_NMODES && s->spare[got].sock < 0) {
			s->spare[got].sock = *sock;
			s->spare[got].pidfd = *pidfd;
			s->spare[got].rc = *rc;
		} else {
			sbx_pool_drop_offer(*sock, *pidfd, rc);
		}
		memset(rc, 0, sizeof(*rc));
	}
	*sock = s->own_spare.sock;
	*pidfd = s->own_spare.pidfd;
	*rc = s->own_spare.rc;
	s->own_spare.sock = s->own_spare.pidfd = -1;
	memset(&s->own_spare.rc, 0, sizeof(s->own_spare.rc));
	/* The next narrowed run's, made while this one goes on. */
	(void)ask(s);
	if ((*listener = take_listener(*sock, err)) < 0) {
		sbx_pool_drop_offer(*sock, *pidfd, rc);
		memset(rc, 0, sizeof(*rc));
		return -1;
	}
	return 0;
}
