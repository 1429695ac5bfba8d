/*
 * test_seccomp_stages.c: the filter's two stages (sbx.h) answer every call
 * as the whole filter does, and the init stage alone lets sbx-init make the
 * calls it needs.
 *
 * A reused sbx-init runs under the init stage and each of its workloads
 * adds the run stage; the kernel runs both and keeps the answer of highest
 * precedence (for equal actions, the newest filter's).  The equivalence is
 * checked by running the programs here, in a small classic-BPF interpreter
 * of the instructions seccomp.c emits, for every syscall number, the other
 * ABIs, and the argument values the argument blocks look at; the control is
 * that the init stage alone differs from the whole filter where it must.
 * test_seccomp.c runs its kernel checks staged as well.  The workload's
 * privilege drop refuses to install the run stage without a filter under
 * it (the run stage alone allows what only the init stage refuses).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "sbx.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

/* Run a classic BPF program on d; the kernel's checker has already refused
 * anything else, so an unknown instruction fails the test. */
static uint32_t bpf_run(const struct sock_fprog *p, const struct seccomp_data *d)
{
	uint32_t a = 0;

	for (size_t pc = 0; pc < p->len; pc++) {
		const struct sock_filter *f = &p->filter[pc];

		switch (f->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			assert_true(f->k + 4 <= sizeof(*d) && f->k % 4 == 0);
			memcpy(&a, (const char *)d + f->k, 4);
			break;
		case BPF_ALU | BPF_AND | BPF_K:
			a &= f->k;
			break;
		case BPF_JMP | BPF_JA:
			pc += f->k;
			break;
		case BPF_JMP | BPF_JEQ | BPF_K:
			pc += a == f->k ? f->jt : f->jf;
			break;
		case BPF_JMP | BPF_JGE | BPF_K:
			pc += a >= f->k ? f->jt : f->jf;
			break;
		case BPF_JMP | BPF_JSET | BPF_K:
			pc += (a & f->k) ? f->jt : f->jf;
			break;
		case BPF_RET | BPF_K:
			return f->k;
		default:
			fail_msg("instruction 0x%x at %zu", f->code, pc);
		}
	}
	fail_msg("ran off the end of the program");
	return 0;
}

/* The kernel's rule over stacked filters (seccomp_run_filters): newest
 * first, and an answer replaces the one so far only when its action is of
 * strictly higher precedence (lower as a signed action). */
static uint32_t stacked(const struct sock_fprog *older, const struct sock_fprog *newer,
			const struct seccomp_data *d)
{
	const struct sock_fprog *order[2] = {newer, older};
	uint32_t ret = SECCOMP_RET_ALLOW;

	for (int i = 0; i < 2; i++) {
		uint32_t cur = bpf_run(order[i], d);
		if ((int32_t)(cur & SECCOMP_RET_ACTION_FULL) <
		    (int32_t)(ret & SECCOMP_RET_ACTION_FULL))
			ret = cur;
	}
	return ret;
}

/* Values the argument blocks test, and their neighbours. */
static const uint64_t values[] = {
	0,
	1,
	2,
	AF_UNIX,
	AF_INET,
	AF_INET6,
	AF_NETLINK,
	40 /* AF_VSOCK */,
	AF_PACKET,
	NETLINK_ROUTE,
	NETLINK_KOBJECT_UEVENT,
	S_IFCHR | 0644,
	S_IFBLK | 0644,
	S_IFREG | 0644,
	S_IFIFO | 0644,
	S_IFREG | S_ISUID | 0755,
	S_ISGID | 0755,
	O_CREAT | O_RDWR,
	O_TMPFILE | O_RDWR,
	SIGCHLD,
	CLONE_NEWUSER | SIGCHLD,
	CLONE_NEWNS,
	CLONE_NEWNET,
	CLONE_VM | CLONE_VFORK | SIGCHLD,
	CLONE_NEWTIME,
	TIOCSTI,
	TIOCLINUX,
	TIOCGWINSZ,
	0xffffffffu,
	0x100000000ull | TIOCSTI,
};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* How many (number, arguments) the whole filter and the stages were asked
 * about, and where they differed. */
struct tally {
	size_t asked, differ;
	char first[160];
};

static void compare_one(const struct sock_fprog *whole, const struct sock_fprog *older,
			const struct sock_fprog *newer, const struct seccomp_data *d,
			struct tally *t)
{
	uint32_t w = bpf_run(whole, d), s = stacked(older, newer, d);

	t->asked++;
	if (w == s)
		return;
	if (!t->differ++)
		snprintf(t->first, sizeof(t->first),
			 "nr %d arch 0x%x args %llx %llx %llx %llx: whole 0x%x, staged 0x%x", d->nr,
			 d->arch, (unsigned long long)d->args[0], (unsigned long long)d->args[1],
			 (unsigned long long)d->args[2], (unsigned long long)d->args[3], w, s);
}

/* Every number below 1024, the x32 range's edges and the top, on this and
 * another architecture; per number each of the first four arguments over
 * values[] (the others 0), and the open/openat flag-and-mode pairs. */
static void compare(const struct sock_fprog *whole, const struct sock_fprog *older,
		    const struct sock_fprog *newer, struct tally *t)
{
	static const uint32_t archs[] = {AUDIT_ARCH_X86_64, AUDIT_ARCH_I386};
	static const uint32_t far[] = {0x40000000u, 0x40000000u | SYS_getpid, 0x7fffffffu,
				       0xfffffffeu, 0xffffffffu};
	struct seccomp_data d;

	memset(t, 0, sizeof(*t));
	for (size_t ai = 0; ai < N_OF(archs); ai++)
		for (uint32_t k = 0; k < 1024 + N_OF(far); k++) {
			memset(&d, 0, sizeof(d));
			d.arch = archs[ai];
			d.nr = (int)(k < 1024 ? k : far[k - 1024]);
			compare_one(whole, older, newer, &d, t);
			for (int arg = 0; arg < 4; arg++)
				for (size_t v = 0; v < N_OF(values); v++) {
					memset(d.args, 0, sizeof(d.args));
					d.args[arg] = values[v];
					compare_one(whole, older, newer, &d, t);
				}
			for (int flags = 1; flags <= 2; flags++) {
				memset(d.args, 0, sizeof(d.args));
				d.args[flags] = O_CREAT | O_WRONLY;
				d.args[flags + 1] = S_ISUID | 0755;
				compare_one(whole, older, newer, &d, t);
			}
		}
}

/* A profile of the session's: whole and both stages, and their equivalence. */
static void check_profile(const char *const *deny, const char *const *allow, bool no_setid)
{
	sbx_err err = {0};
	struct sock_fprog *whole = sbx_seccomp_compile_setid(deny, allow, no_setid, &err);
	struct tally t;

	if (!whole)
		fail_msg("compile: %s", err.msg);
	const struct sock_fprog *init = sbx_seccomp_stage(whole, SBX_SC_STAGE_INIT);
	const struct sock_fprog *run = sbx_seccomp_stage(whole, SBX_SC_STAGE_RUN);
	assert_non_null(init);
	assert_non_null(run);
	/* The point of the stages: a workload installs a few instructions. */
	assert_true(run->len * 4 < whole->len);
	compare(whole, init, run, &t);
	if (t.differ)
		fail_msg("%zu of %zu answers differ; first: %s", t.differ, t.asked, t.first);
	assert_true(t.asked > 100000);
	/* Control: the init stage alone (what init runs under) is not the
	 * whole filter, so the comparison can see a difference. */
	struct sock_fprog allow_all = {
		1, (struct sock_filter[]){BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)}};
	compare(whole, init, &allow_all, &t);
	assert_true(t.differ > 0);
	sbx_seccomp_free(whole);
}

static void test_default_profile(void **state)
{
	(void)state;
	check_profile(NULL, NULL, false);
}

/* The idmapped sessions' setid guard blocks, a widened call, and a deny
 * list naming calls init makes (kill, wait4, socketpair, prlimit64, poll),
 * calls it needs that are refused anyway (mount), and one already refused
 * with another errno (clone3 keeps ENOSYS). */
static void test_narrowed_widened_setid(void **state)
{
	static const char *const deny[] = {"kill",  "wait4",  "socketpair", "prlimit64", "poll",
					   "mount", "clone3", "getcwd",	    "openat",	 NULL};
	static const char *const allow[] = {"io_uring_setup", NULL};

	(void)state;
	check_profile(deny, allow, false);
	check_profile(deny, allow, true);
	check_profile(NULL, NULL, true);
}

/* The init stage alone lets init make what the whole filter refuses it:
 * the scratch reset's mount calls and the deny list's names.  Checked in a
 * child, against the answers of the same calls under the whole filter. */
static const char *const narrowed[] = {"getcwd", "kill", NULL};

static int child_calls(bool whole)
{
	char buf[64];
	int bad = 0;
	long rc;

	/* open_tree of a missing path: ENOENT from the kernel, EPERM from
	 * the filter. */
	rc = syscall(SYS_open_tree, AT_FDCWD, "/nonexistent-sbx", 0);
	if (rc != -1 || errno != (whole ? EPERM : ENOENT)) {
		fprintf(stderr, "open_tree: rc %ld errno %d\n", rc, errno);
		bad = 1;
	}
	rc = syscall(SYS_getcwd, buf, sizeof(buf));
	if (whole ? (rc != -1 || errno != EPERM) : rc < 0) {
		fprintf(stderr, "getcwd: rc %ld errno %d\n", rc, errno);
		bad = 1;
	}
	rc = syscall(SYS_kill, getpid(), 0);
	if (whole ? (rc != -1 || errno != EPERM) : rc != 0) {
		fprintf(stderr, "kill: rc %ld errno %d\n", rc, errno);
		bad = 1;
	}
	/* Refused for init too: the init stage is the whole filter there. */
	rc = syscall(SYS_unshare, CLONE_NEWNS);
	if (rc != -1 || errno != EPERM) {
		fprintf(stderr, "unshare: rc %ld errno %d\n", rc, errno);
		bad = 1;
	}
	return bad;
}

/* Run fn(arg) in a child, which must exit 0. */
static void assert_child_ok(int (*fn)(int), int arg)
{
	int status;

	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fn(arg));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* Under the whole filter (stages 0), the init stage (1) or both (2): the
 * calls answer as the whole filter does, except under the init stage
 * alone. */
static int child_staged_calls(int stages)
{
	sbx_err err = {0};
	struct sock_fprog *whole = sbx_seccomp_compile(narrowed, NULL, &err);

	if (!whole || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return 100;
	for (int k = 1; k <= stages; k++)
		if (sbx_seccomp_install(sbx_seccomp_stage(whole, k), &err) != 0)
			return 101;
	if (!stages && sbx_seccomp_install(whole, &err) != 0)
		return 101;
	return child_calls(stages != 1);
}

static void test_init_stage_alone(void **state)
{
	(void)state;
	assert_child_ok(child_staged_calls, 0); /* control: the whole filter refuses them */
	assert_child_ok(child_staged_calls, 1); /* init's stage lets them through */
	assert_child_ok(child_staged_calls, 2); /* a workload's two stages refuse them again */
}

/* A workload's privilege drop (privdrop.c) with the run stage: refused on
 * a task without a filter, done on one under the init stage (the
 * control).  In a child: it changes ids, capabilities and filters. */
static int child_drop(int init_stage)
{
	sbx_err err = {0};
	struct sock_fprog *whole = sbx_seccomp_compile(NULL, NULL, &err);
	struct sbx_zygote_cfg cfg;
	struct sbx_privdrop_fail f;

	if (!whole)
		return 100;
	memset(&cfg, 0, sizeof(cfg));
	cfg.seccomp = whole;
	cfg.uid = getuid();
	cfg.gid = getgid();
	if (init_stage &&
	    (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	     sbx_seccomp_install(sbx_seccomp_stage(whole, SBX_SC_STAGE_INIT), &err) != 0))
		return 101;
	int rc = sbx_privdrop(&cfg, sbx_seccomp_stage(whole, SBX_SC_STAGE_RUN), &f);
	if (init_stage)
		return rc == 0 ? 0 : (fprintf(stderr, "drop: %s\n", f.what), 1);
	if (rc == 0 || !strstr(f.what, "run stage without")) {
		fprintf(stderr, "drop without init's stage: rc %d, %s\n", rc,
			f.what ? f.what : "-");
		return 1;
	}
	/* Nothing was installed. */
	return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 0 ? 0 : 2;
}

static void test_run_stage_never_alone(void **state)
{
	(void)state;
	assert_child_ok(child_drop, 0);
	assert_child_ok(child_drop, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_profile),
		cmocka_unit_test(test_narrowed_widened_setid),
		cmocka_unit_test(test_init_stage_alone),
		cmocka_unit_test(test_run_stage_never_alone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
