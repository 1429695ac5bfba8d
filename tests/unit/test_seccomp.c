/*
 * test_seccomp.c: the compiled filter, installed in forked children that
 * really make the refused calls.
 *
 * Each check is run in a child that sets no_new_privs, installs the filter
 * (compiled once, with "getcwd" as the session's extra deny) and reports
 * through its exit status: 0 when every call got the expected answer,
 * otherwise 1 after printing what went wrong.  Calls are chosen so that
 * without the filter they would answer differently (succeed, or fail with
 * another errno), so each check fails if its rule is missing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <pthread.h>
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
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sbx.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#define X32_SYSCALL_BIT 0x40000000

static const char *const extra_deny[] = {"getcwd", NULL};
static struct sock_fprog *prog;

static int group_setup(void **state)
{
	sbx_err err = {0};

	(void)state;
	prog = sbx_seccomp_compile(extra_deny, &err);
	if (!prog) {
		fprintf(stderr, "compile: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	sbx_seccomp_free(prog);
	return 0;
}

/* Run fn in a child; filtered says whether the filter goes on first.
 * Returns the raw wait status. */
static int run_child(int (*fn)(void), bool filtered)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sbx_err err = {0};

		if (filtered) {
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
				_exit(100);
			if (sbx_seccomp_install(prog, &err) != 0) {
				fprintf(stderr, "install: %s\n", err.msg);
				_exit(101);
			}
		}
		_exit(fn());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void assert_child_ok(int (*fn)(void))
{
	int status = run_child(fn, true);

	if (WIFSIGNALED(status))
		fail_msg("filtered child killed by signal %d", WTERMSIG(status));
	if (WEXITSTATUS(status) != 0)
		fail_msg("filtered child reported failure (exit %d; see stderr)",
			 WEXITSTATUS(status));
}

/* 0 if rc is -1 with errno want; 1 (after saying why) otherwise. */
static int want_errno(const char *what, long rc, int want)
{
	int e = errno;

	if (rc == -1 && e == want)
		return 0;
	fprintf(stderr, "%s: rc=%ld errno=%d (%s), want %s\n", what, rc, rc == -1 ? e : 0,
		rc == -1 ? strerror(e) : "-", strerror(want));
	return 1;
}

static int want_ok(const char *what, long rc)
{
	if (rc != -1)
		return 0;
	fprintf(stderr, "%s: failed with %s, want success\n", what, strerror(errno));
	return 1;
}

/* ---- compile ---- */

static void test_compile(void **state)
{
	static const char *const dup[] = {"mount", "clone", "ioctl", "getcwd", "getcwd", NULL};
	struct sock_fprog *p;
	sbx_err err = {0};

	(void)state;
	p = sbx_seccomp_compile(NULL, &err);
	assert_non_null(p);
	assert_true(p->len > 10);
	assert_non_null(p->filter);
	sbx_seccomp_free(p);
	/* Names the baseline covers, conditional ones and duplicates are fine. */
	p = sbx_seccomp_compile(dup, &err);
	if (!p)
		fail_msg("compile: %s", err.msg);
	sbx_seccomp_free(p);
	sbx_seccomp_free(NULL);
}

static void test_unknown_name(void **state)
{
	static const char *const bad[] = {"getcwd", "no_such_syscall_xyz", NULL};
	static const char *const empty[] = {"", NULL};
	sbx_err err = {0};

	(void)state;
	assert_null(sbx_seccomp_compile(bad, &err));
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.msg, "no_such_syscall_xyz"));
	assert_null(sbx_seccomp_compile(empty, &err));
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
}

static int child_install_without_nnp(void)
{
	sbx_err err = {0};

	if (sbx_seccomp_install(prog, &err) != -1 || !strstr(err.msg, "no_new_privs")) {
		fprintf(stderr, "install without no_new_privs: \"%s\"\n", err.msg);
		return 1;
	}
	/* And getcwd still works: nothing was installed. */
	return want_ok("getcwd", syscall(SYS_getcwd, (char[64]){0}, 64));
}

static void test_install_needs_nnp(void **state)
{
	int status;

	(void)state;
	status = run_child(child_install_without_nnp, false);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- refused calls ---- */

static int child_denied(void)
{
	char buf[64];
	struct iovec iov = {buf, sizeof(buf)};
	int bad = 0;

	bad += want_errno("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER), EPERM);
	bad += want_errno("unshare(CLONE_NEWNS)", unshare(CLONE_NEWNS), EPERM);
	bad += want_errno("mount", mount(NULL, "/nonexistent-sbx-test", "tmpfs", 0, NULL), EPERM);
	bad += want_errno("umount2", umount2("/nonexistent-sbx-test", 0), EPERM);
	bad += want_errno("keyctl",
			  syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0),
			  EPERM);
	bad += want_errno("add_key",
			  syscall(SYS_add_key, "sbx_no_such_key_type", "sbx", "x", 1,
				  KEY_SPEC_SESSION_KEYRING),
			  EPERM);
	bad += want_errno("ptrace(TRACEME)", ptrace(PTRACE_TRACEME, 0, 0, 0), EPERM);
	bad += want_errno("process_vm_readv",
			  syscall(SYS_process_vm_readv, getpid(), &iov, 1, &iov, 1, 0), EPERM);
	bad += want_errno("bpf", syscall(SYS_bpf, BPF_MAP_CREATE, NULL, 0), EPERM);
	bad += want_errno("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0),
			  EPERM);
	bad += want_errno("userfaultfd", syscall(SYS_userfaultfd, 0), EPERM);
	bad += want_errno("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL), EPERM);
	bad += want_errno("setns", setns(0, 0), EPERM);
	bad += want_errno("chroot", chroot("/"), EPERM);
	bad += want_errno("pivot_root", syscall(SYS_pivot_root, "/nonexistent-a", "/nonexistent-b"),
			  EPERM);
	bad += want_errno("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, NULL, 0), EPERM);
	bad += want_errno("fsopen", syscall(SYS_fsopen, "tmpfs", 0), EPERM);
	bad += want_errno("syslog", syscall(SYS_syslog, 10, NULL, 0), EPERM);
	bad += want_errno("init_module", syscall(SYS_init_module, NULL, 0, ""), EPERM);
	bad += want_errno("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0), EPERM);
	bad += want_errno("getcwd (session extra)", syscall(SYS_getcwd, buf, sizeof(buf)), EPERM);
	return bad ? 1 : 0;
}

static void test_denied(void **state)
{
	(void)state;
	assert_child_ok(child_denied);
}

static int child_ioctl(void)
{
	int fd = open("/dev/null", O_RDONLY);
	int p[2], n = 0, bad = 0;
	char c = 'x';

	if (fd < 0 || pipe(p) != 0)
		return 2;
	/* Unfiltered, these are ENOTTY on /dev/null. */
	bad += want_errno("TIOCSTI", ioctl(fd, TIOCSTI, &c), EPERM);
	bad += want_errno("TIOCSTI with junk in the upper bits",
			  syscall(SYS_ioctl, fd, 0xdead00000000ul | TIOCSTI, &c), EPERM);
	bad += want_errno("TIOCLINUX", ioctl(fd, TIOCLINUX, &c), EPERM);
	/* Every other ioctl is untouched. */
	bad += want_errno("TCGETS on /dev/null", ioctl(fd, TCGETS, (char[64]){0}), ENOTTY);
	bad += want_ok("FIONREAD on a pipe", ioctl(p[0], FIONREAD, &n));
	return bad ? 1 : 0;
}

static void test_ioctl(void **state)
{
	(void)state;
	assert_child_ok(child_ioctl);
}

static void *thread_fn(void *arg)
{
	return arg;
}

static int child_clone(void)
{
	static const unsigned long ns[] = {
		CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,    CLONE_NEWNET,
		CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP,
	};
	int bad = 0, status;
	pthread_t t;
	void *ret = NULL;
	size_t i;
	pid_t pid;

	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		long rc = syscall(SYS_clone, ns[i] | SIGCHLD, 0, NULL, NULL, 0);

		if (rc == 0)
			_exit(0); /* the rule is missing: we are the new child */
		if (rc > 0)
			waitpid((pid_t)rc, NULL, 0);
		bad += want_errno("clone with a namespace flag", rc, EPERM);
	}
	bad += want_errno("clone3", syscall(SYS_clone3, NULL, 0), ENOSYS);
	/* Plain fork and threads still work (glibc falls back from clone3). */
	pid = fork();
	if (pid == 0)
		_exit(7);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 7) {
		fprintf(stderr, "fork under the filter failed\n");
		bad++;
	}
	if (pthread_create(&t, NULL, thread_fn, (void *)0x5b) != 0 || pthread_join(t, &ret) != 0 ||
	    ret != (void *)0x5b) {
		fprintf(stderr, "pthread_create under the filter failed\n");
		bad++;
	}
	return bad ? 1 : 0;
}

static void test_clone(void **state)
{
	(void)state;
	assert_child_ok(child_clone);
}

static char tmpdir[64];

static int child_mknod_personality(void)
{
	char p[128];
	int bad = 0;

	snprintf(p, sizeof(p), "%s/chr", tmpdir);
	bad += want_errno("mknod S_IFCHR", mknod(p, S_IFCHR | 0600, makedev(1, 3)), EPERM);
	bad += want_errno("mknodat S_IFBLK", mknodat(AT_FDCWD, p, S_IFBLK | 0600, makedev(7, 0)),
			  EPERM);
	bad += want_errno("raw mknod S_IFCHR", syscall(SYS_mknod, p, S_IFCHR | 0600, makedev(1, 3)),
			  EPERM);
	snprintf(p, sizeof(p), "%s/fifo", tmpdir);
	bad += want_ok("mknod S_IFIFO", mknodat(AT_FDCWD, p, S_IFIFO | 0600, 0));
	snprintf(p, sizeof(p), "%s/reg", tmpdir);
	bad += want_ok("mknod S_IFREG", mknodat(AT_FDCWD, p, S_IFREG | 0600, 0));

	bad += want_ok("personality(query)", personality(0xffffffff));
	bad += want_ok("personality(PER_LINUX)", personality(PER_LINUX));
	bad += want_errno("personality(PER_LINUX32)", personality(PER_LINUX32), EPERM);
	bad += want_errno("personality(ADDR_NO_RANDOMIZE)", personality(ADDR_NO_RANDOMIZE), EPERM);
	bad += want_errno("personality(READ_IMPLIES_EXEC)", personality(READ_IMPLIES_EXEC), EPERM);
	bad += want_errno("personality(0xfffffffe)", personality(0xfffffffe), EPERM);
	bad += want_errno("personality(0x80000000)", personality(0x80000000), EPERM);
	/* The kernel reads 32 bits: junk above them must not hide a flag. */
	bad += want_errno("personality with junk in the upper bits",
			  syscall(SYS_personality, 0xffffffff00000000ul | ADDR_NO_RANDOMIZE),
			  EPERM);
	return bad ? 1 : 0;
}

static void test_mknod_personality(void **state)
{
	static const char *const names[] = {"fifo", "reg", "chr"};
	char p[128];
	int status;
	size_t i;

	(void)state;
	strcpy(tmpdir, "/tmp/sbx-test-seccomp-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	status = run_child(child_mknod_personality, true);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmpdir, names[i]);
		unlink(p);
	}
	assert_int_equal(rmdir(tmpdir), 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static pid_t pid_before;

static int child_allowed(void)
{
	char buf[8];
	int p[2], bad = 0;

	if (syscall(SYS_getpid) != pid_before) {
		fprintf(stderr, "getpid under the filter is wrong\n");
		bad++;
	}
	bad += want_ok("pipe", pipe(p));
	bad += want_ok("write", write(p[1], "hi", 2));
	bad += want_ok("read", read(p[0], buf, sizeof(buf)));
	bad += want_ok("open /dev/null", open("/dev/null", O_RDONLY));
	bad += want_ok("prctl(PR_GET_NO_NEW_PRIVS)", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
	return bad ? 1 : 0;
}

static void test_allowed(void **state)
{
	int status;
	pid_t pid;

	(void)state;
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sbx_err err = {0};

		pid_before = getpid();
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
		    sbx_seccomp_install(prog, &err) != 0)
			_exit(100);
		_exit(child_allowed());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- other ABIs ---- */

static int child_x32(void)
{
	long rc = syscall(X32_SYSCALL_BIT | SYS_getpid);

	fprintf(stderr, "x32 getpid returned %ld (%s)\n", rc, rc < 0 ? strerror(errno) : "ran");
	return rc > 0 ? 3 : 0;
}

static void test_x32_killed(void **state)
{
	int status;

	(void)state;
	/* Whatever the kernel says about x32 (this one may lack it), the
	 * filter must kill before the kernel gets to say it. */
	status = run_child(child_x32, true);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSYS)
		fail_msg("x32 syscall not killed by SIGSYS (status 0x%x)", status);
}

#if defined(__x86_64__)
static int child_int80(void)
{
	long ret;

	/* i386 getpid is 20; the 64-bit int $0x80 entry clobbers r8-r11. */
	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
	return ret == getpid() ? 0 : 4;
}

static void test_int80_killed(void **state)
{
	int status;

	(void)state;
	/* Control: without the filter, int $0x80 works when the kernel has
	 * IA32 emulation; without it there is nothing to filter. */
	status = run_child(child_int80, false);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		print_message("int $0x80 does not work without a filter here (status 0x%x)\n",
			      status);
		skip();
	}
	status = run_child(child_int80, true);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSYS)
		fail_msg("i386 syscall not killed by SIGSYS (status 0x%x)", status);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile),
		cmocka_unit_test(test_unknown_name),
		cmocka_unit_test(test_install_needs_nnp),
		cmocka_unit_test(test_denied),
		cmocka_unit_test(test_ioctl),
		cmocka_unit_test(test_clone),
		cmocka_unit_test(test_mknod_personality),
		cmocka_unit_test(test_allowed),
		cmocka_unit_test(test_x32_killed),
#if defined(__x86_64__)
		cmocka_unit_test(test_int80_killed),
#endif
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
