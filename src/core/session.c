/*
 * session.c: host side of a session: its lifecycle and the warm-init pool.
 *
 * Open: check the backend, choose its ids (backend_ids.c), make (or
 * check) the work dir and give it to the sandbox's host uid, describe the
 * root, make the cgroup, compile the seccomp filter once, then start the
 * backend: the zygote for userns and privileged (backend_zygote.c),
 * nothing resident for none and bubblewrap (backend_none.c,
 * backend_bubblewrap.c); finish waits for the zygote to say ready (or why
 * not).  What differs per backend is chosen by backend.c's table.
 * Close: stop the backend (SIGKILL the zygote: the kernel then kills every
 * process of the session, as the zygote is PID 1 of its PID namespace;
 * or reap the inits the host forked), and remove the session dir unless
 * the work dir was pinned by the caller.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <limits.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "session_impl.h"

#define READY_TIMEOUT_MS SBX_SESSION_READY_TIMEOUT_MS

/* RLIMIT_NOFILE of every run: the caller's nofile, else 1024 or this
 * process's hard limit if lower (a host under `ulimit -Hn 512` must not
 * make every run fail to set a default it never asked for). */
uint64_t sbx_session_run_nofile(const sbx_session_opts *o)
{
	struct rlimit rl;

	if (o->nofile)
		return o->nofile;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max < DEFAULT_NOFILE)
		return rl.rlim_max;
	return DEFAULT_NOFILE;
}

/* Wait for the zygote's next offer of a warm init (with a memory
 * ceiling: once the placer has put it in its run cgroup, *rc).  -1 with
 * err (no offer came); -2 with err and errno when one came but cannot be
 * used: not placed (ESRCH: its init died), the zygote could not prepare
 * it, or its fds did not arrive (EMFILE: the kernel drops what a process
 * at its open-files limit cannot take, MSG_CTRUNC).  An offer consumed
 * is one fewer outstanding: on -2 the caller asks for the next (want),
 * or the pool shrinks until runs wait for offers that never come. */
int sbx_pool_recv_offer(sbx_session *s, int *sock, int *pidfd, sbx_net *mode, sbx_run_cgroup *rc,
			sbx_err *err)
{
	struct sbx_placed pl;
	struct sbx_proto_offer off;
	struct pollfd pfd = {s->placer ? sbx_placer_fd(s->placer) : s->ctl_fd, POLLIN, 0};
	int fds[2] = {-1, -1}, pr;
	size_t nfds;
	ssize_t n;

	while ((pr = poll(&pfd, 1, READY_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (pr == 0)
		return sbx_err_set(err, SBX_E_EXECUTION, ETIMEDOUT,
				   "the sandbox did not offer a run within %d ms",
				   READY_TIMEOUT_MS);
	memset(&off, 0, sizeof(off));
	if (s->placer) {
		n = sbx_placer_recv(s->placer, &pl, fds, &nfds);
		off = pl.off;
		*rc = pl.rc;
		if (n > 0)
			n = sizeof(off);
	} else {
		n = sbx_proto_recv_fds(s->ctl_fd, &off, sizeof(off), fds, 2, &nfds);
	}
	if (n <= 0)
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, errno, "the session has ended");
	if (n == sizeof(off) && off.magic == SBX_PROTO_MAGIC)
		*mode = (sbx_net)off.mode;
	/* Made before a spare's take (sbx_session_adopt), whatever it holds:
	 * let go, and the next one asked for. */
	if (s->stale_offers > 0 && n == sizeof(off) && off.magic == SBX_PROTO_MAGIC &&
	    off.mode != SBX_NET_OWN) {
		sbx_run_cgroup placed;
		memset(&placed, 0, sizeof(placed));
		if (s->placer)
			placed = pl.rc;
		s->stale_offers--;
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		sbx_cgroup_run_kill(&placed);
		sbx_cgroup_run_remove(&placed);
		memset(rc, 0, sizeof(*rc));
		if (sbx_pool_send_want(s, s->net) < 0)
			return sbx_err_set(err, SBX_E_SESSION_CLOSED, errno,
					   "the session has ended");
		return -3;
	}
	if (s->placer && off.err_no == 0 && pl.place_errno != 0) {
		/* Not placed: the init died (take another) or the cgroup
		 * refused (the run fails with why). */
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		sbx_err_set(err, SBX_E_EXECUTION, pl.place_errno, "%s", pl.msg);
		errno = pl.place_errno;
		return -2;
	}
	if (n != sizeof(off) || off.magic != SBX_PROTO_MAGIC) {
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		return sbx_err_set(err, SBX_E_EXECUTION, EPROTO,
				   "the sandbox could not prepare a run: garbled offer");
	}
	if (off.err_no != 0 || nfds != 2) {
		int e = off.err_no ? (int)off.err_no : EMFILE;
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		if (off.err_no)
			sbx_err_set(err, SBX_E_EXECUTION, e,
				    "the sandbox could not prepare a run: %s", strerror(e));
		else
			sbx_err_set(err, SBX_E_EXECUTION, e,
				    "the sandbox's offer of a run lost its descriptors: this "
				    "process is at its open-files limit");
		errno = e;
		return -2;
	}
	*pidfd = fds[0];
	*sock = fds[1];
	*mode = (sbx_net)off.mode;
	return 0;
}

int sbx_pool_send_want(sbx_session *s, uint32_t mode)
{
	struct sbx_proto_want want = {SBX_PROTO_MAGIC, mode};
	/* A full socket cannot happen: one want per offer. */
	return send(s->ctl_fd, &want, sizeof(want), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? -1 : 0;
}

/* Let an idle init go: closing its socket ends it; with a memory
 * ceiling its run cgroup goes too. */
static void drop_idle(sbx_session *s, int sock, int pidfd, uint32_t cg_seq,
		      struct sbx_init_held *held)
{
	close(sock);
	close(pidfd);
	sbx_init_held_close(held);
	if (cg_seq)
		sbx_cgroup_run_drop(&s->cg, cg_seq);
}

/* Move what runs gave back into idle; past max_idle they are let go. */
static void drain_inbox(sbx_session *s)
{
	struct sbx_back back;
	int fds[2 + SBX_HELD_N];
	size_t nfds;

	while (sbx_proto_recv_fds(s->inbox[0], &back, sizeof(back), fds, 2 + SBX_HELD_N, &nfds) ==
	       (ssize_t)sizeof(back)) {
		sbx_net m = (sbx_net)back.off.mode;
		struct sbx_init_held held;
		sbx_init_held_none(&held);
		if (nfds == 2 + SBX_HELD_N) {
			memcpy(held.fd, fds + 2, sizeof(held.fd));
			if (!back.cg_seq)
				sbx_init_held_close(&held);
		}
		if ((nfds == 2 || nfds == 2 + SBX_HELD_N) && back.off.magic == SBX_PROTO_MAGIC &&
		    m < SBX_NET_NMODES && s->n_idle[m] < s->max_idle) {
			s->idle[m][s->n_idle[m]].pidfd = fds[0];
			s->idle[m][s->n_idle[m]].cg_seq = back.cg_seq;
			s->idle[m][s->n_idle[m]].held = held;
			s->idle[m][s->n_idle[m]++].sock = fds[1];
			continue;
		}
		if (nfds == 2 || nfds == 2 + SBX_HELD_N)
			drop_idle(s, fds[1], fds[0], back.cg_seq, &held);
		else
			for (size_t i = 0; i < nfds; i++)
				close(fds[i]);
	}
}

bool sbx_pool_offer_expired(int sock)
{
	struct pollfd p = {sock, POLLOUT, 0};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLHUP);
}

/* An idle init of mode that said it is ready (with a memory ceiling, *rc
 * its run cgroup); those found gone or expired are dropped, those still
 * getting ready stay.  Never waits. */
static bool take_idle(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc)
{
	size_t k = 0;
	bool found = false;

	drain_inbox(s);
	for (size_t i = 0; i < s->n_idle[mode]; i++) {
		int fd = s->idle[mode][i].sock, pfd = s->idle[mode][i].pidfd;
		uint32_t seq = s->idle[mode][i].cg_seq;
		if (!found) {
			char c;
			ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
			if (n == 1 && c == 'r' && !sbx_pool_offer_expired(fd)) {
				*sock = fd;
				*pidfd = pfd;
				sbx_cgroup_run_adopt(&s->cg, seq, &s->idle[mode][i].held, rc);
				rc->ready = true;
				found = true;
				continue;
			}
			if (n >= 0 || (errno != EAGAIN && errno != EINTR) ||
			    sbx_pool_offer_expired(fd)) {
				drop_idle(s, fd, pfd, seq, &s->idle[mode][i].held);
				continue;
			}
		}
		s->idle[mode][k++] = s->idle[mode][i];
	}
	s->n_idle[mode] = k;
	return found;
}

bool sbx_session_direct(const sbx_session *s)
{
	return s->none;
}

int sbx_session_reuse_fd(const sbx_session *s)
{
	return s->inbox[1];
}

/* Let an offer go: closing its socket ends the init; its cgroup goes. */
void sbx_pool_drop_offer(int sock, int pidfd, sbx_run_cgroup *rc)
{
	close(sock);
	close(pidfd);
	sbx_cgroup_run_kill(rc);
	sbx_cgroup_run_remove(rc);
}

/*
 * What take would do with the offers already there, without waiting:
 * those that expired unused (init.c) are dropped, those of another mode
 * set aside (each asking the zygote for one of mode, as take does), own-
 * namespace ones kept for their run, and the first live one of mode set
 * aside for the next run.  A caller with an event loop then waits for a
 * live offer there instead of in take.  (Not with a placer: its offers
 * come placed, and take reports its failures.)
 */
static void sort_offers(sbx_session *s, sbx_net mode)
{
	struct pollfd p = {s->ctl_fd, POLLIN, 0};

	for (int i = 0; i < 2 * SBX_MAX_WARM_RUNS + 8 && !s->placer && s->ctl_fd >= 0 &&
			s->spare[mode].sock < 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
	     i++) {
		int sock, pidfd;
		sbx_net got;
		sbx_run_cgroup rc;
		sbx_err err;
		struct sbx_proto_offer off;
		/* A failure the zygote offers is take's to report: left there. */
		if (recv(s->ctl_fd, &off, sizeof(off), MSG_PEEK | MSG_DONTWAIT) != sizeof(off) ||
		    off.magic != SBX_PROTO_MAGIC || off.err_no != 0)
			return;
		memset(&rc, 0, sizeof(rc));
		int r = sbx_pool_recv_offer(s, &sock, &pidfd, &got, &rc, &err);
		if (r == -3)
			continue;
		/* Unusable (its fds lost at our fd limit): a warm one is
		 * replaced, and take waits for the new one; an own-namespace
		 * one is asked for again by the next take_own.  -1: the zygote
		 * is gone, take says so. */
		if (r == -2 && (uint32_t)got != SBX_NET_OWN)
			(void)sbx_pool_send_want(s, mode);
		else if (r == -2 && s->own_pending)
			s->own_pending--;
		if (r < 0)
			return;
		if ((uint32_t)got == SBX_NET_OWN) {
			sbx_ownnet_keep(s, sock, pidfd, &rc);
			continue;
		}
		bool live = !sbx_pool_offer_expired(sock) && got < SBX_NET_NMODES &&
			    s->spare[got].sock < 0;
		if (!live || got != mode)
			(void)sbx_pool_send_want(s, mode);
		if (!live) {
			sbx_pool_drop_offer(sock, pidfd, &rc);
			continue;
		}
		s->spare[got].sock = sock;
		s->spare[got].pidfd = pidfd;
		s->spare[got].rc = rc;
		s->spare[got].unasked = got == mode;
	}
}

/* Ask, in mode, on behalf of the offer set aside for runs of m, if it
 * has not asked yet: an offer set aside asks for no next one (its taking
 * would), and the zygote makes no more than it was asked for. */
static void ask_for(sbx_session *s, int m, sbx_net mode)
{
	if (s->spare[m].sock >= 0 && s->spare[m].unasked && sbx_pool_send_want(s, mode) == 0)
		s->spare[m].unasked = false;
}

/* A run of mode needs an offer: those set aside for runs of another mode
 * that took a given-back init instead ask for it, once each. */
static void ask_for_parked(sbx_session *s, sbx_net mode)
{
	for (int m = 0; m < SBX_NET_NMODES; m++)
		if (m != (int)mode)
			ask_for(s, m, mode);
}

/* A taken spare's old offers come placed like any other (memory ceiling):
 * those already there are let go now, without waiting, so that the fd
 * says when a run can start (take would drop one, then wait for the next
 * on the caller's loop). */
static void drop_stale_placed(sbx_session *s)
{
	while (s->placer && s->stale_offers > 0) {
		struct pollfd p = {sbx_placer_fd(s->placer), POLLIN, 0};
		if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))
			return;
		int sock, pidfd;
		sbx_net got = SBX_NET_BLOCKED;
		sbx_run_cgroup rc;
		sbx_err err;
		memset(&rc, 0, sizeof(rc));
		int r = sbx_pool_recv_offer(s, &sock, &pidfd, &got, &rc, &err);
		if (r == 0 && (uint32_t)got == SBX_NET_OWN) {
			sbx_ownnet_keep(s, sock, pidfd, &rc);
		} else if (r == 0) {
			/* (Cannot be: every warm offer is stale while any are
			 * counted.)  One taken asks for the next. */
			sbx_pool_drop_offer(sock, pidfd, &rc);
			(void)sbx_pool_send_want(s, s->net);
		} else if (r != -3) {
			return; /* take reports it */
		}
	}
}

int sbx_pool_unless_ready(int fd)
{
	struct pollfd p = {fd, POLLIN, 0};
	return poll(&p, 1, 0) == 1 ? -1 : fd;
}

int sbx_session_offer_fd(sbx_session *s, sbx_net mode)
{
	if (s->none || s->pending || mode >= SBX_NET_NMODES)
		return -1;
	/* With a memory ceiling an offer is ready once it is placed. */
	if (s->placer) {
		drop_stale_placed(s);
		return s->stale_offers ? sbx_placer_fd(s->placer)
				       : sbx_pool_unless_ready(sbx_placer_fd(s->placer));
	}
	sort_offers(s, mode);
	if (s->spare[mode].sock >= 0)
		return -1;
	ask_for_parked(s, mode);
	/* Offers of other modes and old ones were taken in hand: what is left
	 * readable is for take. */
	return sbx_pool_unless_ready(s->ctl_fd);
}

int sbx_session_take_warm(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc,
			  sbx_err *err)
{
	memset(rc, 0, sizeof(*rc));
	if (mode > s->net)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "network_mode %s is wider than the session's %s",
				   sbx_net_name(mode), sbx_net_name(s->net));
	return s->be->take(s, mode, sock, pidfd, rc, err);
}

int sbx_pool_take(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc,
		  sbx_err *err)
{
	if (s->ctl_fd < 0)
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, 0, "the session is closed");
	if (sbx_session_expired(s))
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, 0,
				   "the session's lifetime has passed");
	if (s->pending)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "the session is still setting up (sbx_session_finish first)");
	/* A given-back init that is ready costs the zygote nothing, and asks
	 * for no new offer.  It goes before an offer of this mode set aside
	 * (sort_offers), which stays for a later run: taking the offer would
	 * have the zygote make a fresh init for every run, and none would
	 * ever be reused.  A run of another mode asks for the offer's next
	 * one instead (ask_for_parked). */
	if (s->inbox[0] >= 0 && take_idle(s, mode, sock, pidfd, rc)) {
		/* The offer this run's offer_fd set aside may be the one a run
		 * waiting on the zygote's socket was woken for (sbxd waits on
		 * its loop): that run would find the socket empty again and
		 * sleep while the offer sat here.  The offer asks for its next
		 * one now, once, so an offer comes for such a run. */
		ask_for(s, mode, mode);
		return 0;
	}
	if (s->spare[mode].sock < 0)
		ask_for_parked(s, mode);
	/* Every offer we take (used, set aside or dropped) asks for the
	 * next one, in the mode of the run that took it: the zygote prepares
	 * it while this run goes on.  Offers of another mode are set aside
	 * for the next run of theirs (one per mode), so runs alternating
	 * between modes stay warm; after at most warm_runs of them one of
	 * ours comes. */
	for (;;) {
		sbx_net got = SBX_NET_BLOCKED;
		int rc_;
		if (s->spare[mode].sock >= 0) {
			*sock = s->spare[mode].sock;
			*pidfd = s->spare[mode].pidfd;
			*rc = s->spare[mode].rc;
			memset(&s->spare[mode].rc, 0, sizeof(*rc));
			s->spare[mode].sock = s->spare[mode].pidfd = -1;
			s->spare[mode].unasked = false; /* the want below asks */
			got = mode;
		} else if ((rc_ = sbx_pool_recv_offer(s, sock, pidfd, &got, rc, err)) == -3) {
			continue;
		} else if (rc_ < 0) {
			/* An unusable offer (not placed, not prepared, its
			 * fds lost) still asks for the next. */
			int e = errno;
			/* An own-namespace offer is not ours to fail on. */
			if ((uint32_t)got == SBX_NET_OWN) {
				s->own_pending--;
				continue;
			}
			if (rc_ == -2)
				(void)sbx_pool_send_want(s, mode);
			errno = e;
			return -1;
		}
		/* Asked for outside the count of warm offers: asks for nothing. */
		if ((uint32_t)got == SBX_NET_OWN) {
			sbx_ownnet_keep(s, *sock, *pidfd, rc);
			memset(rc, 0, sizeof(*rc));
			continue;
		}
		if (sbx_pool_send_want(s, mode) < 0) {
			sbx_pool_drop_offer(*sock, *pidfd, rc);
			return sbx_err_set(err, SBX_E_SESSION_CLOSED, errno,
					   "the session has ended");
		}
		/* One that sat unused until it expired: the want just sent
		 * asks for a fresh one. */
		if (sbx_pool_offer_expired(*sock)) {
			sbx_pool_drop_offer(*sock, *pidfd, rc);
			memset(rc, 0, sizeof(*rc));
			continue;
		}
		if (got == mode)
			return 0;
		if (got < SBX_NET_NMODES && s->spare[got].sock < 0) {
			s->spare[got].sock = *sock;
			s->spare[got].pidfd = *pidfd;
			s->spare[got].rc = *rc;
			s->spare[got].unasked = false;
		} else {
			sbx_pool_drop_offer(*sock, *pidfd, rc);
		}
		memset(rc, 0, sizeof(*rc));
	}
}

const char *sbx_session_work_dir(const sbx_session *s)
{
	return s->work_dir;
}

int sbx_session_work_dir_fd(const sbx_session *s)
{
	return s->work_fd;
}

uid_t sbx_session_host_uid(const sbx_session *s)
{
	return s->work_uid;
}

gid_t sbx_session_host_gid(const sbx_session *s)
{
	return s->work_gid;
}

const char *sbx_session_id(const sbx_session *s)
{
	return s->id;
}

const char *sbx_session_backend(const sbx_session *s)
{
	return s->backend;
}

int64_t sbx_session_cpu_usage_us(const sbx_session *s)
{
	return s->cg.version ? sbx_cgroup_cpu_usage_us(&s->cg) : -1;
}

int64_t sbx_session_oom_kills(const sbx_session *s)
{
	int64_t n = s->cg.oom_path[0] ? sbx_cgroup_oom_kills(&s->cg) : -1;
	return n < 0 ? -1 : n - s->cg.oom_base;
}

const char *const *sbx_session_gpu_nodes(const sbx_session *s)
{
	return s->gpu.inside_node;
}

sbx_net sbx_session_network_mode(const sbx_session *s)
{
	return s->net;
}

int sbx_session_proxy_listener(const sbx_session *s, sbx_err *err)
{
	if (s->proxy_listener < 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "the session's network_mode is %s: it has no proxy listener",
				   sbx_net_name(s->net));
	int fd = fcntl(s->proxy_listener, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "dup: %s", strerror(errno));
	return fd;
}

/* open: the host starts connecting the open namespace to the outside
 * (opennet.c; sbx_session_finish goes on with it until pasta is ready);
 * userns sessions' namespaces belong to the session's user namespace,
 * which pasta and nft must join.  It is asked of the namespace itself,
 * not of /proc/<zygote>: the zygote is a non-dumpable clone of the
 * template, whose memory belongs to the initial user namespace, so a
 * host that is not root may not open its /proc/<pid>/ns. */
static int connect_open(sbx_session *s, int open_ns, const char *const *deny, sbx_err *err)
{
	int userns = -1;
	if (!s->privileged) {
		userns = ioctl(open_ns, NS_GET_USERNS);
		if (userns < 0)
			return sbx_err_set(err, SBX_E_EXECUTION, errno,
					   "the owner of the sandbox's network namespace: %s",
					   strerror(errno));
	}
	int rc = sbx_opennet_begin(&s->open, userns, open_ns, deny, err);
	if (userns >= 0)
		close(userns);
	return rc;
}

const sbx_cgroup *sbx_session_cgroup(const sbx_session *s)
{
	return &s->cg;
}

const char *sbx_session_oom_path(const sbx_session *s)
{
	return s->cg.oom_path[0] ? s->cg.oom_path : NULL;
}

int sbx_protect_from_oom(sbx_err *err)
{
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "-1000", 5) != 5) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, e,
				   "oom_score_adj -1000: %s (needs CAP_SYS_RESOURCE)", strerror(e));
	}
	close(fd);
	return 0;
}

uint64_t sbx_session_expire_at_ms(const sbx_session *s)
{
	return s->expire_at_ms;
}

bool sbx_session_expired(const sbx_session *s)
{
	return s->expire_at_ms && sbx_monotonic_ms() >= s->expire_at_ms;
}

bool sbx_session_alive(sbx_session *s)
{
	/* Over at its end at once, on every backend, while its runs are
	 * still in their grace period. */
	return s && !sbx_session_expired(s) && s->be->alive(s);
}

static bool have_cap(cap_value_t cap)
{
	cap_t now = cap_get_proc();
	cap_flag_value_t v = CAP_CLEAR;
	if (now)
		cap_get_flag(now, cap, CAP_EFFECTIVE, &v);
	cap_free(now);
	return v == CAP_SET;
}

/* The backend's requirements, checked before anything is made. */
static int check_backend(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	if (!o->backend)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "backend: required");
	if (o->warm_runs > SBX_MAX_WARM_RUNS)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "warm_runs: at most %d, got %u",
				   SBX_MAX_WARM_RUNS, o->warm_runs);
	snprintf(s->backend, sizeof(s->backend), "%.15s", o->backend);
	const struct sbx_backend *be = sbx_backend_find(o->backend);
	if (!be)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "backend '%s' is not provided by this core", o->backend);
	s->be = be;
	s->privileged = be->privileged;
	s->none = be->none;
	if (be->check && be->check(o, err) < 0)
		return -1;
	if (o->network_mode >= SBX_NET_NMODES)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "network_mode: unknown mode %d",
				   (int)o->network_mode);
	if (o->network_mode != SBX_NET_BLOCKED && !be->netns)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
				   "network_mode %s needs backend \"userns\" or \"privileged\": "
				   "%s has no per-session network namespace for the proxy or pasta",
				   sbx_net_name(o->network_mode), o->backend);
	if (o->gpus && !be->gpus)
		return sbx_err_set(
			err, SBX_E_BACKEND_UNAVAILABLE, 0,
			"gpus = %u needs backend \"privileged\" (NVIDIA's driver refuses "
			"an unprivileged user namespace, and %s has no device isolation)",
			o->gpus, o->backend);
	bool limits = o->memory_bytes || o->cpu_milli || o->pids_max;
	if (limits && geteuid() != 0 && !o->cgroup_root && !getenv("SBX_CGROUP_ROOT"))
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EPERM,
				   "resource ceilings (memory, cpu, pids) need a cgroup sbx may "
				   "write: run as root, or delegate one and set SBX_CGROUP_ROOT");
	/* Above our hard limit only CAP_SYS_RESOURCE raises it (for the
	 * zygote, or the workload itself while still root): say so now, not
	 * at every run. */
	struct rlimit nf;
	if (o->nofile && getrlimit(RLIMIT_NOFILE, &nf) == 0 && o->nofile > nf.rlim_max &&
	    !have_cap(CAP_SYS_RESOURCE))
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EPERM,
				   "nofile = %llu is above this process's hard open-files limit "
				   "%llu, and raising it needs CAP_SYS_RESOURCE (ulimit -Hn, "
				   "LimitNOFILE=)",
				   (unsigned long long)o->nofile, (unsigned long long)nf.rlim_max);
	if (o->disk_bytes && geteuid() != 0)
		return sbx_err_set(
			err, SBX_E_BACKEND_UNAVAILABLE, EPERM,
			"disk_mb: the size-capped work dir is a tmpfs mount, which needs "
			"root; leave disk_mb unset when not root");
	if (o->disk_bytes && o->work_dir)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "disk_mb cannot cap a pinned work_dir (it lives on the host's "
				   "disk); leave work_dir unset");
	return 0;
}

/* disk_mb: the work dir becomes a tmpfs of that size, mounted on the host
 * (its pages are charged to the memory cgroup of whoever writes them, so
 * memory_mb bounds it too).  A full one gives ENOSPC; the host disk is
 * never written. */
static int mount_disk(sbx_session *s, uint64_t bytes, sbx_err *err)
{
	char data[128];
	snprintf(data, sizeof(data), "size=%llu,nr_inodes=%llu,mode=0700,uid=%u,gid=%u",
		 (unsigned long long)bytes, (unsigned long long)sbx_tmpfs_inodes(bytes),
		 (unsigned)s->host_uid, (unsigned)s->host_gid);
	if (mount("sbx-work", s->work_dir, "tmpfs", MS_NOSUID | MS_NODEV, data) != 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "disk_mb: mount a %llu-byte tmpfs on %s: %s",
				   (unsigned long long)bytes, s->work_dir, strerror(errno));
	s->disk_mounted = true;
	close(s->work_fd);
	s->work_fd = open(s->work_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s->work_fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "open %s: %s", s->work_dir,
				   strerror(errno));
	return 0;
}

/* The cgroup rules of the session's GPU nodes, then its cgroup. */
static int make_cgroup(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	sbx_cgroup_limits lim = {
		.memory_bytes = o->memory_bytes,
		.cpu_milli = o->cpu_milli,
		.pids_max = o->pids_max,
		.devices = s->gpu.rule,
		.n_devices = s->gpu.n_nodes,
	};
	return sbx_cgroup_create(&s->cg, o->cgroup_root, s->id, &lim, err);
}

/* A NULL-terminated copy of a string list (NULL for NULL); false when out of memory. */
static bool strv_dup(const char *const *v, char ***out)
{
	size_t n = 0;

	*out = NULL;
	if (!v)
		return true;
	while (v[n])
		n++;
	char **c = calloc(n + 1, sizeof(*c));
	if (!c)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(c[i] = strdup(v[i]))) {
			while (i--)
				free(c[i]);
			free(c);
			return false;
		}
	*out = c;
	return true;
}

/*
 * As root, the copies of the work dir's mount the sandbox gets (idmap.c).
 * A pinned dir of another owner is idmapped to the sandbox's host ids
 * (never chowned; *idmapped: the setid guard applies).  bubblewrap binds
 * by path and walks it as the sandbox's host uid, so a pinned dir goes
 * through the stage instead (a copy each run attaches there), which that
 * uid may walk even when the dir's own path (/root/...) is closed to it.
 */
static int work_dir_copies(sbx_session *s, const sbx_session_opts *o, bool *idmapped, sbx_err *err)
{
	if (!s->pinned && s->none)
		return 0; /* fresh: sbx's own dir, walkable by that uid */
	if (sbx_idmap_work_dir(&s->fs, s->work_dir, s->work_uid, s->work_gid, s->host_uid,
			       s->host_gid, s->none, &s->work_ns, err) < 0)
		return -1;
	*idmapped = *idmapped || s->work_ns >= 0;
	if (!s->none) {
		if (s->work_ns >= 0)
			close(s->work_ns); /* the copies hold it */
		s->work_ns = -1;
		return 0;
	}
	if (sbx_statedir_stage(s, o, err) < 0)
		return -1;
	for (size_t i = 0; i < s->fs.n; i++)
		if (s->fs.e[i].kind == SBX_FS_BIND && s->fs.e[i].src == s->work_dir)
			s->fs.e[i].src = s->work_stage;
	return 0;
}

sbx_session *sbx_session_start(const sbx_session_opts *o, sbx_err *err)
{
	struct sock_fprog *prog = NULL;
	sbx_session *s;

	for (size_t i = 0; i < o->n_binds; i++) {
		const char *p = o->binds[i].path;
		if (!p || p[0] != '/' || strstr(p, "/../") || !strcmp(p, "/tmp") ||
		    !strcmp(p, "/dev/shm") || !strcmp(p, SBX_SANDBOX_WORKDIR) ||
		    !strncmp(p, SBX_SANDBOX_WORKDIR "/", strlen(SBX_SANDBOX_WORKDIR) + 1) ||
		    strlen(p) >= PATH_MAX - 16)
			return sbx_err_set(
				       err, SBX_E_INVALID_ARGUMENT, 0,
				       "bind path '%s' is not allowed (absolute, normalized, not "
				       "/tmp, /dev/shm or the work dir)",
				       p ? p : "(null)"),
			       NULL;
	}
	/* The work dir, the binds and a pinned work dir's second mount. */
	if (o->n_binds + (o->work_dir ? 1 : 0) >= SBX_MAX_CARRY)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "at most %d extra paths",
				   SBX_MAX_CARRY - 1 - (o->work_dir ? 1 : 0)),
		       NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory"), NULL;
	s->zygote = -1;
	s->ctl_fd = s->work_fd = s->lock_fd = s->proxy_listener = s->work_ns = -1;
	s->inbox[0] = s->inbox[1] = -1;
	s->max_idle = o->pids_max ? o->pids_max / 16 : MAX_IDLE;
	if (s->max_idle > MAX_IDLE)
		s->max_idle = MAX_IDLE;
	sbx_opennet_init(&s->open);
	for (int m = 0; m < SBX_NET_NMODES; m++)
		s->spare[m].sock = s->spare[m].pidfd = -1;
	s->own_spare.sock = s->own_spare.pidfd = -1;
	s->net = o->network_mode;
	for (int i = 0; i < SBX_GPU_MAX; i++)
		s->gpu.lock_fd[i] = -1;
	/* None until bubblewrap's start makes them: a session closed half-made
	 * must not close the caller's fd 0 as its own. */
	s->direct.userns_fd = -1;
	for (int i = 0; i < SBX_FS_MAX_DATA; i++)
		s->direct.bwrap_data_fd[i] = -1;
	if (check_backend(s, o, err) < 0) {
		free(s);
		return NULL;
	}
	/* The backend's ids, before its dir is made: the dir is given to them. */
	if (s->be->ids(s, o, err) < 0) {
		free(s);
		return NULL;
	}
	if (sbx_statedir_prepare(s, o, err) < 0 ||
	    (s->be->ids_own && s->be->ids_own(s, o, err) < 0))
		goto fail;
	/* Only a pinned dir the sandbox reaches through an idmap keeps an
	 * owner of its own (work_dir_copies). */
	if (!s->pinned || geteuid() != 0 || !s->be->own_root) {
		s->work_uid = s->host_uid;
		s->work_gid = s->host_gid;
	}
	if (o->disk_bytes && mount_disk(s, o->disk_bytes, err) < 0)
		goto fail;
	if (o->gpus) {
		char lock_dir[PATH_MAX];
		const char *state = getenv("SBX_GPU_LOCK_DIR");
		snprintf(lock_dir, sizeof(lock_dir), "%s",
			 state && *state ? state : "/run/sbx-gpus");
		if (sbx_gpu_prepare(&s->gpu, o, lock_dir, err) < 0)
			goto fail;
	}
	/* The root every run sees (backend none has none of its own). */
	if (s->be->own_root && sbx_rootfs_describe(&s->fs, o, s->work_dir, &s->gpu, s->inside_uid,
						   s->inside_gid, err) < 0)
		goto fail;
	/* read_write_paths of someone else's: idmapped (the zygote attaches
	 * them; for bubblewrap each run's workload does, idmap.c). */
	bool idmapped = false;
	if (s->be->own_root &&
	    sbx_idmap_prepare(&s->fs, o, s->host_uid, s->host_gid, s->none, &idmapped, err) < 0)
		goto fail;
	if (s->be->own_root && geteuid() == 0 && work_dir_copies(s, o, &idmapped, err) < 0)
		goto fail;
	if (make_cgroup(s, o, err) < 0)
		goto fail;
	prog = sbx_seccomp_compile_setid(o->seccomp_deny, o->seccomp_allow, idmapped, err);
	if (!prog)
		goto fail;
	/* Its end, which every run's init enforces (init.c): counted from
	 * here, before any process of the session exists. */
	if (o->lifetime_ms)
		s->expire_at_ms = sbx_monotonic_ms() + o->lifetime_ms;
	s->expire_grace_ms = o->expire_grace_ms ? o->expire_grace_ms : SBX_DEFAULT_EXPIRE_GRACE_MS;
	/* The backend's processes; the zygote keeps its own copy of the
	 * filter, bubblewrap takes ours. */
	int rc = s->be->start(s, o, &prog, err);
	sbx_seccomp_free(prog);
	prog = NULL;
	sbx_idmap_close(&s->fs, false); /* the zygote has its copies */
	if (rc < 0)
		goto fail;
	if (rc == 0)
		return s;
	if (!strv_dup(o->open_deny, &s->open_deny)) {
		sbx_session_close(s, NULL);
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory"), NULL;
	}
	s->pending = true;
	return s;
fail:
	sbx_seccomp_free(prog);
	sbx_session_close(s, NULL);
	return NULL;
}

/* The open network is coming up (opennet.c): from the zygote's early
 * message (open mode) until nft and pasta are both done. */
static bool connecting(const sbx_session *s)
{
	return sbx_opennet_wait_fd(&s->open) >= 0;
}

/* Until the zygote is ready, its ready message is what to wait for (the
 * open network, started earlier, needs nothing of ours meanwhile); then
 * the open network, if it is still coming up. */
int sbx_session_ready_fd(const sbx_session *s)
{
	if (!s->pending)
		return -1;
	return s->zygote_ready && connecting(s) ? sbx_opennet_wait_fd(&s->open) : s->ctl_fd;
}

/* Open mode's early message: start connecting the open namespace while
 * the zygote builds the root.  The network stays connecting until finish
 * steps it, which is only once the zygote is ready; a failure here fails
 * the open. */
static int early_open(sbx_session *s, int open_ns, sbx_err *err)
{
	int rc = 0;
	if (s->net < SBX_NET_OPEN || connecting(s))
		rc = sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
				 "the sandbox handed over an open network out of turn");
	else if (open_ns < 0)
		rc = sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
				 "the sandbox did not hand over its open network");
	else if (connect_open(s, open_ns, (const char *const *)s->open_deny, err) < 0)
		rc = -1;
	if (open_ns >= 0)
		close(open_ns);
	return rc;
}

/* The zygote is ready: take what it handed over.  On failure the session
 * stays pending (unusable). */
static int finish_zygote(sbx_session *s, int timeout_ms, sbx_err *err)
{
	int open_ns = -1, rc;

	while ((rc = sbx_zygote_backend_ready(s, timeout_ms, &open_ns, err)) == 2) {
		if (early_open(s, open_ns, err) < 0)
			return -1;
		open_ns = -1;
	}
	if (rc != 0)
		return rc;
	if (open_ns >= 0)
		close(open_ns); /* (only the early message carries it) */
	/* Each warm init goes into its run cgroup as it is offered. */
	if (s->cg.oom_path[0] && !(s->placer = sbx_placer_start(s->ctl_fd, &s->cg, err)))
		return -1;
	if ((s->net >= SBX_NET_ALLOWLIST && s->proxy_listener < 0) ||
	    (s->net >= SBX_NET_OPEN && !connecting(s)))
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
				   "the sandbox did not hand over its %s network",
				   sbx_net_name(s->net));
	s->zygote_ready = true;
	return 0;
}

int sbx_session_finish(sbx_session *s, int timeout_ms, sbx_err *err)
{
	int rc;

	if (!s->pending)
		return 0;
	if (!s->zygote_ready && (rc = finish_zygote(s, timeout_ms, err)) != 0)
		return rc;
	if (connecting(s) && (rc = sbx_opennet_step(&s->open, timeout_ms, err)) != 0)
		return rc;
	s->pending = false;
	return 0;
}

sbx_session *sbx_session_open(const sbx_session_opts *o, sbx_err *err)
{
	sbx_session *s = sbx_session_start(o, err);
	if (!s)
		return NULL;
	int rc = sbx_session_finish(s, READY_TIMEOUT_MS, err);
	/* Ready, but its open network still coming up: pasta's own deadline
	 * bounds the rest. */
	if (rc == 1 && connecting(s))
		rc = sbx_session_finish(s, -1, err);
	if (rc == 0)
		return s;
	if (rc == 1)
		sbx_err_set(err, SBX_E_EXECUTION, ETIMEDOUT,
			    "the sandbox did not become ready within %d ms", READY_TIMEOUT_MS);
	sbx_session_close(s, NULL);
	return NULL;
}

/* A spare taken by an open of o (spare.c): its lifetime counts from now.
 * The zygote is told (the inits it starts from here on enforce the end);
 * the warm inits it offered before carry no end of their own, so each is
 * let go when it comes, and asks for one made after
 * (sbx_pool_recv_offer).  Never waits: sbxd takes spares on its loop. */
int sbx_session_adopt(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	if (!o->lifetime_ms)
		return 0;
	if (s->pending || s->none || s->ctl_fd < 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "not a spare session");
	s->expire_at_ms = sbx_monotonic_ms() + o->lifetime_ms;
	s->expire_grace_ms = o->expire_grace_ms ? o->expire_grace_ms : SBX_DEFAULT_EXPIRE_GRACE_MS;
	struct sbx_proto_expire m = {SBX_PROTO_MAGIC, SBX_PROTO_EXPIRE,	  s->expire_at_ms,
				     o->lifetime_ms,  s->expire_grace_ms, 0};
	if (send(s->ctl_fd, &m, sizeof(m), MSG_NOSIGNAL) != (ssize_t)sizeof(m))
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, errno, "the spare session has ended");
	/* Offers come in the order made: the next warm_runs are the old ones. */
	s->stale_offers = o->warm_runs ? o->warm_runs : 1;
	return 0;
}

/* Close, the part after which nothing of the session can run: its
 * pasta, its placer, every fd of ours that reaches into it. */
static void release_fds(sbx_session *s)
{
	sbx_opennet_stop_nowait(&s->open);
	sbx_placer_stop(s->placer);
	s->placer = NULL;
	sbx_ownnet_close(s);
	for (int m = 0; m < SBX_NET_NMODES; m++) {
		if (s->spare[m].sock >= 0)
			sbx_pool_drop_offer(s->spare[m].sock, s->spare[m].pidfd, &s->spare[m].rc);
	}
	for (int m = 0; m < SBX_NET_NMODES; m++)
		for (size_t i = 0; i < s->n_idle[m]; i++) {
			/* (Their run cgroups go with the session's.) */
			close(s->idle[m][i].sock);
			close(s->idle[m][i].pidfd);
			sbx_init_held_close(&s->idle[m][i].held);
		}
	memset(s->n_idle, 0, sizeof(s->n_idle));
	for (int i = 0; i < 2; i++)
		if (s->inbox[i] >= 0)
			close(s->inbox[i]);
	s->inbox[0] = s->inbox[1] = -1;
	if (s->proxy_listener >= 0)
		close(s->proxy_listener);
	if (s->ctl_fd >= 0)
		close(s->ctl_fd);
	if (s->work_fd >= 0)
		close(s->work_fd);
	s->ctl_fd = s->work_fd = s->proxy_listener = -1;
}

/* Close, the rest: what is left once the zygote is reaped. */
static int release_rest(sbx_session *s, sbx_err *err)
{
	int rc = 0;

	/* The zygote is reaped, so its namespaces' processes are gone; the
	 * cgroup kills whatever else is left (backend none) and goes. */
	if (sbx_cgroup_destroy(&s->cg, err) < 0)
		rc = -1;
	sbx_gpu_release(&s->gpu);
	sbx_idmap_close(&s->fs, true);
	if (s->work_ns >= 0)
		close(s->work_ns);
	sbx_rootfs_free(&s->fs);
	for (size_t i = 0; s->open_deny && s->open_deny[i]; i++)
		free(s->open_deny[i]);
	free(s->open_deny);
	sbx_seccomp_free(s->prog);
	if (s->disk_mounted && umount2(s->work_dir, MNT_DETACH) != 0 && rc == 0)
		rc = sbx_err_set(err, SBX_E_EXECUTION, errno, "unmount %s: %s", s->work_dir,
				 strerror(errno));
	if (s->session_dir[0] && sbx_statedir_remove(s->session_dir) != 0)
		rc = sbx_err_set(err, SBX_E_EXECUTION, errno, "remove %s: %s", s->session_dir,
				 strerror(errno));
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s);
	return rc;
}

/* The reaper's part of an asynchronous close (reaper.c's thread). */
static void finish_close(void *arg)
{
	sbx_session *s = arg;
	s->be->stop(s);
	(void)release_rest(s, NULL);
}

/*
 * Asynchronous where nothing is lost by it: a ready zygote session in a
 * dir of its own (not pinned, no disk tmpfs to unmount, no GPUs whose
 * locks a next session may wait for; a half-made one, rare, is closed as
 * before).  The zygote is killed (as PID 1 of the
 * session's namespaces its end is every process's), our fds into the
 * session closed, and its dir renamed out of the state dir's listing; the
 * reap (namespace teardown: 0.3-7 ms of RCU waits), the cgroup's rmdir
 * and the dir's removal go to the reaper's thread.  A crash in between
 * leaves a dir whose lock is free, which the dead-session sweep removes.
 */
static bool close_async(sbx_session *s)
{
	if (s->none || s->pinned || s->disk_mounted || s->gpu.n_nodes || !s->session_dir[0] ||
	    s->zygote <= 0 || s->pending)
		return false;
	kill(s->zygote, SIGKILL);
	release_fds(s);
	bool retired = sbx_statedir_retire(s) == 0;
	/* Every fd of ours goes now, not later on another thread (a caller
	 * may count its fds).  The lock too: the dir, out of the listing, is
	 * removed by whoever comes first, the reaper or a sweep. */
	sbx_idmap_close(&s->fs, true);
	if (s->work_ns >= 0)
		close(s->work_ns);
	s->work_ns = -1;
	if (retired && s->lock_fd >= 0) {
		close(s->lock_fd);
		s->lock_fd = -1;
	}
	if (!retired || sbx_reap_job(finish_close, s) != 0)
		finish_close(s);
	return true;
}

int sbx_session_close(sbx_session *s, sbx_err *err)
{
	if (!s)
		return 0;
	if (close_async(s))
		return 0;
	s->be->stop(s);
	release_fds(s);
	return release_rest(s, err);
}
