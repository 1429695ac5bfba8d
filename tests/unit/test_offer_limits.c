/*
 * test_offer_limits.c: a warm offer is never lost at an open-files limit.
 *
 * The zygote offers each warm init as two fds (SCM_RIGHTS) and makes one
 * more per offer the host consumes (a "want"); a lost offer is a run that
 * waits for one that never comes ("did not offer a run within 10000 ms").
 * Two ways one got lost, each made deterministic here:
 *
 *   - the host at its limit when the offer arrives: the kernel installs
 *     what fits and drops the rest (MSG_CTRUNC).  The take must fail with
 *     EMFILE and still ask for another: the next take (fds freed) works.
 *   - the zygote's sendmsg refused with ETOOMANYREFS: the kernel counts
 *     fds in flight per sending uid (the aux uid, shared by every
 *     session's zygote) against the sender's soft RLIMIT_NOFILE.  A
 *     helper of that uid holds 300 fds in flight; the session is opened
 *     under a soft limit of 96, which the zygote inherits: the host
 *     raises it.  Under a hard limit of 96 (nobody may raise it without
 *     CAP_SYS_RESOURCE) the offer cannot go: the take says why instead
 *     of timing out, and once the fds are read a run comes.  The control
 *     shows a sender of that uid at 96 really is refused.
 *
 * Needs root (the aux uid, user namespaces); skipped otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "session_impl.h"

#define IN_FLIGHT 300
#define LOW_NOFILE 96

static char state[] = "/tmp/sbx-offer-limits-XXXXXX";

static sbx_session *open_session(void)
{
	static const char *const sys[] = {"/usr", "/bin", "/lib", "/lib64", "/sbin", NULL};
	sbx_session_opts o;
	sbx_err err;

	memset(&o, 0, sizeof(o));
	memset(&err, 0, sizeof(err));
	o.backend = "userns";
	o.state_dir = state;
	o.system_ro = sys;
	o.warm_runs = 1;
	o.warm_idle_ms = UINT32_MAX;
	sbx_session *s = sbx_session_open(&o, &err);
	if (!s)
		fail_msg("open: %s", err.msg);
	return s;
}

static int send_fds(int sock, const int *fds, size_t n)
{
	char buf[CMSG_SPACE(200 * sizeof(int))];
	struct iovec iov = {"x", 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf};

	memset(buf, 0, sizeof(buf));
	mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	return sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

static int become_aux(void)
{
	uid_t id = SBX_DEFAULT_AUX_UID;
	return setgroups(0, NULL) | setresgid(id, id, id) | setresuid(id, id, id);
}

/* As the aux uid: hold IN_FLIGHT fds in flight (an unread socket) until
 * the parent closes *done; 'k' on ready once they are. */
static pid_t hold_in_flight(int *done)
{
	int ready[2], stop[2];
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(stop, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int sp[2], fds[IN_FLIGHT / 2], nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
		char c;
		close(ready[0]);
		close(stop[1]);
		for (size_t i = 0; i < IN_FLIGHT / 2; i++)
			fds[i] = nul;
		if (become_aux() != 0 ||
		    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0 ||
		    send_fds(sp[0], fds, IN_FLIGHT / 2) != 0 ||
		    send_fds(sp[0], fds, IN_FLIGHT / 2) != 0)
			_exit(1);
		(void)!write(ready[1], "k", 1);
		(void)!read(stop[0], &c, 1);
		_exit(0);
	}
	close(ready[1]);
	close(stop[0]);
	char c;
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	*done = stop[1];
	return pid;
}

/* Control: a sender of the aux uid under LOW_NOFILE is refused. */
static int probe_send_refused(void)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = {LOW_NOFILE, LOW_NOFILE};
		int sp[2], nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (become_aux() != 0 || setrlimit(RLIMIT_NOFILE, &rl) != 0 ||
		    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
			_exit(2);
		_exit(send_fds(sp[0], &nul, 1) != 0 && errno == ETOOMANYREFS ? 0 : 1);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 3;
}

static void take_ok(sbx_session *s)
{
	int sock, pidfd;
	sbx_run_cgroup rc;
	sbx_err err;

	memset(&err, 0, sizeof(err));
	if (sbx_session_take_warm(s, SBX_NET_BLOCKED, &sock, &pidfd, &rc, &err) != 0)
		fail_msg("take: %s", err.msg);
	sbx_pool_drop_offer(sock, pidfd, &rc);
}

/* A session whose one offer is there, and every fd below our limit taken
 * but one: the offer's first fd fits, its second the kernel drops.  *old:
 * the limit to restore after closing fill[0..*n). */
static sbx_session *at_one_free_fd(int fill[64], int *n, struct rlimit *old)
{
	sbx_session *s = open_session();
	struct pollfd p = {s->ctl_fd, POLLIN, 0};
	/* The offer is there (a bound for a broken build, not a timing check). */
	assert_int_equal(poll(&p, 1, 60000), 1);

	struct rlimit low;
	int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(probe >= 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, old), 0);
	low = *old;
	low.rlim_cur = (rlim_t)probe + 32;
	close(probe);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	*n = 0;
	while (*n < 64 && (fill[*n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		(*n)++;
	assert_true(*n < 64 && errno == EMFILE);
	close(fill[--*n]);
	return s;
}

static void restore_fds(int fill[64], int n, const struct rlimit *old)
{
	while (n > 0)
		close(fill[--n]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, old), 0);
}

/* sbx_session_take_warm (sbxlua's runs). */
static void test_an_offer_arriving_at_the_hosts_fd_limit_is_replaced(void **state_)
{
	(void)state_;
	if (geteuid() != 0)
		skip();
	struct rlimit old;
	int fill[64], n;
	sbx_session *s = at_one_free_fd(fill, &n, &old);

	int sock, pidfd;
	sbx_run_cgroup rc;
	sbx_err err;
	memset(&err, 0, sizeof(err));
	int r = sbx_session_take_warm(s, SBX_NET_BLOCKED, &sock, &pidfd, &rc, &err);
	restore_fds(fill, n, &old);
	/* With fds again, the offer asked for in its place comes (the
	 * lost offer's take said why it failed). */
	take_ok(s);
	assert_int_equal(r, -1);
	assert_int_equal(err.sys_errno, EMFILE);
	assert_non_null(strstr(err.msg, "open-files limit"));
	sbx_session_close(s, NULL);
}

/* sbx_session_offer_fd (sbxd's loop, which then waits on the fd it
 * returns): the offer it read and lost is asked for again. */
static void test_an_offer_sorted_at_the_hosts_fd_limit_is_replaced(void **state_)
{
	(void)state_;
	if (geteuid() != 0)
		skip();
	struct rlimit old;
	int fill[64], n;
	sbx_session *s = at_one_free_fd(fill, &n, &old);
	int fd = sbx_session_offer_fd(s, SBX_NET_BLOCKED);
	restore_fds(fill, n, &old);
	/* The lost offer was replaced: the replacement is either on its way
	 * (the session's socket to wait on) or already there (-1: nothing to
	 * wait for), as fast as the zygote is.  Waited for, it is set aside. */
	if (fd >= 0) {
		assert_int_equal(fd, s->ctl_fd);
		struct pollfd p = {fd, POLLIN, 0};
		assert_int_equal(poll(&p, 1, 10000), 1);
		assert_int_equal(sbx_session_offer_fd(s, SBX_NET_BLOCKED), -1);
	}
	take_ok(s);
	sbx_session_close(s, NULL);
}

static void test_the_zygotes_offers_survive_its_uids_fds_in_flight(void **state_)
{
	(void)state_;
	if (geteuid() != 0)
		skip();
	int done;
	pid_t holder = hold_in_flight(&done);
	assert_int_equal(probe_send_refused(), 0);

	struct rlimit old, low;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = LOW_NOFILE;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	sbx_session *s = open_session();
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	take_ok(s);
	take_ok(s);
	sbx_session_close(s, NULL);

	close(done);
	int st;
	assert_int_equal(waitpid(holder, &st, 0), holder);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* In a child under a hard limit of LOW_NOFILE, which nobody may raise
 * without CAP_SYS_RESOURCE: the zygote's offer cannot go while the helper
 * holds its fds, and the take says why (not a timeout); once they are
 * read, the offer asked for in its place comes. */
static int hard_limit_child(int done)
{
	struct rlimit low = {LOW_NOFILE, LOW_NOFILE};
	int sock, pidfd;
	sbx_run_cgroup rc;
	sbx_err err;

	if (setrlimit(RLIMIT_NOFILE, &low) != 0)
		return 10;
	sbx_session *s = open_session();
	memset(&err, 0, sizeof(err));
	int r = sbx_session_take_warm(s, SBX_NET_BLOCKED, &sock, &pidfd, &rc, &err);
	close(done);
	if (r == 0 || err.sys_errno != ETOOMANYREFS) {
		fprintf(stderr, "first take: %d %s\n", r, err.msg);
		return 11;
	}
	/* Bounded: the zygote tries each offer for SBX_ZYGOTE_SEND_WAIT_MS;
	 * one it began before the helper ended may still have given up. */
	for (int i = 0; i < 3; i++) {
		memset(&err, 0, sizeof(err));
		if (sbx_session_take_warm(s, SBX_NET_BLOCKED, &sock, &pidfd, &rc, &err) == 0) {
			sbx_pool_drop_offer(sock, pidfd, &rc);
			sbx_session_close(s, NULL);
			return 0;
		}
		fprintf(stderr, "take: %s\n", err.msg);
	}
	return 12;
}

static void test_a_refused_offer_says_why_and_is_replaced(void **state_)
{
	(void)state_;
	if (geteuid() != 0)
		skip();
	int done, st;
	pid_t holder = hold_in_flight(&done);
	assert_int_equal(probe_send_refused(), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(hard_limit_child(done));
	close(done);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(waitpid(holder, &st, 0), holder);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_an_offer_arriving_at_the_hosts_fd_limit_is_replaced),
		cmocka_unit_test(test_an_offer_sorted_at_the_hosts_fd_limit_is_replaced),
		cmocka_unit_test(test_the_zygotes_offers_survive_its_uids_fds_in_flight),
		cmocka_unit_test(test_a_refused_offer_says_why_and_is_replaced),
	};
	if (!mkdtemp(state))
		return 1;
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	rmdir(state);
	return rc;
}
