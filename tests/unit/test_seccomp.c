/*
 * test_seccomp.c: the compiled filter, installed in forked children that
 * really make the refused calls.
 *
 * Each check is run in a child that sets no_new_privs, installs the filter
 * (compiled once, with "getcwd" as the session's extra deny; some checks
 * compile a widened one) and reports
 * through its exit status: 0 when every call got the expected answer,
 * otherwise 1 after printing what went wrong.  Calls are chosen so that
 * without the filter they would answer differently (succeed, or fail with
 * another errno), so each check fails if its rule is missing.
 *
 * Every check runs twice: with the whole filter, and staged as a reused
 * sbx-init has it (the init stage, then the run stage on top: sbx.h), which
 * must answer every call the same.  test_seccomp_stages.c compares the two
 * for every number and argument shape without the kernel.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/landlock.h>
#include <linux/netlink.h>
#include <linux/openat2.h>
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
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
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
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#define X32_SYSCALL_BIT 0x40000000
/* x86_64 numbers newer than libseccomp 2.5.4 (which stops at 451). */
#define NR_STATMOUNT 457
#define NR_LISTMOUNT 458
#define NR_MSEAL 462
#define NR_OPEN_TREE_ATTR 467
#define NR_FCHMODAT2 452

static const char *const extra_deny[] = {"getcwd", NULL};
static struct sock_fprog *prog;
/* The second group: children install the filter's two stages. */
static bool staged;

static int group_setup(void **state)
{
	sbx_err err = {0};

	(void)state;
	prog = sbx_seccomp_compile(extra_deny, NULL, &err);
	if (!prog) {
		fprintf(stderr, "compile: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int group_setup_staged(void **state)
{
	staged = true;
	return group_setup(state);
}

static int group_teardown(void **state)
{
	(void)state;
	sbx_seccomp_free(prog);
	return 0;
}

/* Run fn in a child under filter (none when NULL).  Returns the raw wait
 * status. */
static int run_child_with(int (*fn)(void), const struct sock_fprog *filter)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sbx_err err = {0};

		if (filter) {
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
				_exit(100);
			if (staged &&
			    (sbx_seccomp_install(sbx_seccomp_stage(filter, SBX_SC_STAGE_INIT),
						 &err) != 0 ||
			     sbx_seccomp_install(sbx_seccomp_stage(filter, SBX_SC_STAGE_RUN),
						 &err) != 0)) {
				fprintf(stderr, "install the stages: %s\n", err.msg);
				_exit(101);
			}
			if (!staged && sbx_seccomp_install(filter, &err) != 0) {
				fprintf(stderr, "install: %s\n", err.msg);
				_exit(101);
			}
		}
		_exit(fn());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

/* Run fn in a child, under the session filter when filtered. */
static int run_child(int (*fn)(void), bool filtered)
{
	return run_child_with(fn, filtered ? prog : NULL);
}

static void assert_status_ok(int status)
{
	if (WIFSIGNALED(status))
		fail_msg("filtered child killed by signal %d", WTERMSIG(status));
	if (WEXITSTATUS(status) != 0)
		fail_msg("filtered child reported failure (exit %d; see stderr)",
			 WEXITSTATUS(status));
}

static void assert_child_ok(int (*fn)(void))
{
	assert_status_ok(run_child(fn, true));
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
	p = sbx_seccomp_compile(NULL, NULL, &err);
	assert_non_null(p);
	assert_true(p->len > 10);
	assert_non_null(p->filter);
	sbx_seccomp_free(p);
	/* Names the baseline covers, conditional ones and duplicates are fine. */
	p = sbx_seccomp_compile(dup, NULL, &err);
	if (!p)
		fail_msg("compile: %s", err.msg);
	sbx_seccomp_free(p);
	sbx_seccomp_free(NULL);
	/* The profile names only syscalls of this architecture, once each. */
	if (sbx_seccomp_selfcheck(&err) != 0)
		fail_msg("%s", err.msg);
}

static void test_unknown_name(void **state)
{
	static const char *const bad[] = {"getcwd", "no_such_syscall_xyz", NULL};
	static const char *const empty[] = {"", NULL};
	static const char *const foreign[] = {"socketcall", NULL};
	static const char *const not_widenable[] = {"ptrace", NULL};
	struct sock_fprog *p;
	sbx_err err = {0};

	(void)state;
	assert_null(sbx_seccomp_compile(bad, NULL, &err));
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.msg, "no_such_syscall_xyz"));
	assert_null(sbx_seccomp_compile(empty, NULL, &err));
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
	/* Another architecture's name narrows nothing here but is no error. */
	p = sbx_seccomp_compile(foreign, NULL, &err);
	if (!p)
		fail_msg("compile with a foreign deny name: %s", err.msg);
	sbx_seccomp_free(p);
	/* Widening: unknown names, another architecture's names and names
	 * outside the widenable set are all refused (fail closed). */
	assert_null(sbx_seccomp_compile(NULL, bad, &err));
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.msg, "no_such_syscall_xyz"));
	assert_null(sbx_seccomp_compile(NULL, foreign, &err));
	assert_non_null(strstr(err.msg, "socketcall"));
	assert_null(sbx_seccomp_compile(NULL, not_widenable, &err));
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.msg, "ptrace"));
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

/* ---- the allow-list ---- */

/* Syscalls newer than libseccomp 2.5.4's table, and numbers above ours. */
static int child_new_syscalls(void)
{
	int bad = 0;

	bad += want_errno("statmount (457)", syscall(NR_STATMOUNT, NULL, NULL, 0, 0), ENOSYS);
	bad += want_errno("listmount (458)", syscall(NR_LISTMOUNT, NULL, NULL, 0, 0), ENOSYS);
	bad += want_errno("mseal (462)", syscall(NR_MSEAL, 0, 0, 0), ENOSYS);
	bad += want_errno("open_tree_attr (467)",
			  syscall(NR_OPEN_TREE_ATTR, AT_FDCWD, "/", 0, NULL, 0), ENOSYS);
	bad += want_errno("syscall 470", syscall(470, 0, 0, 0), ENOSYS);
	bad += want_errno("syscall 1000", syscall(1000, 0, 0, 0), ENOSYS);
	bad += want_errno("syscall 0x3fffffff", syscall(0x3fffffff, 0, 0, 0), ENOSYS);
	bad += want_errno("syscall -1", syscall(-1, 0, 0, 0), ENOSYS);
	/* Refused by name from the table, not by libseccomp's: tuxcall, an
	 * unimplemented one the allow-list leaves out. */
	bad += want_errno("tuxcall", syscall(SYS_tuxcall), ENOSYS);
	return bad ? 1 : 0;
}

/* Control: the same calls without the filter, on this kernel. */
static int child_new_syscalls_unfiltered(void)
{
	int seen = 0;

	errno = 0;
	seen += syscall(NR_STATMOUNT, NULL, NULL, 0, 0) == 0 || errno != ENOSYS;
	errno = 0;
	seen += syscall(NR_LISTMOUNT, NULL, NULL, 0, 0) == 0 || errno != ENOSYS;
	errno = 0;
	seen += syscall(NR_MSEAL, 0, 0, 0) == 0 || errno != ENOSYS;
	errno = 0;
	seen += syscall(NR_OPEN_TREE_ATTR, -1, NULL, 0, NULL, 0) == 0 || errno != ENOSYS;
	return seen;
}

static void test_new_syscalls(void **state)
{
	int status;

	(void)state;
	status = run_child(child_new_syscalls_unfiltered, false);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) < 4)
		print_message("note: only %d of statmount/listmount/mseal/open_tree_attr exist on "
			      "this kernel; the others cannot tell the filter's ENOSYS apart\n",
			      WEXITSTATUS(status));
	assert_child_ok(child_new_syscalls);
}

static int child_socket(void)
{
	int sv[2], bad = 0;

	bad += want_ok("socket(AF_UNIX)", socket(AF_UNIX, SOCK_STREAM, 0));
	bad += want_ok("socket(AF_INET)", socket(AF_INET, SOCK_DGRAM, 0));
	errno = 0;
	if (socket(AF_INET6, SOCK_DGRAM, 0) < 0 && errno != EAFNOSUPPORT) {
		fprintf(stderr, "socket(AF_INET6): %s\n", strerror(errno));
		bad++;
	}
	bad += want_ok("socket(AF_NETLINK, NETLINK_ROUTE)",
		       socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
	bad += want_errno("socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)",
			  socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT), EPROTONOSUPPORT);
	bad += want_errno("socket(AF_NETLINK, NETLINK_AUDIT)",
			  socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT), EPROTONOSUPPORT);
	bad += want_errno("socket(AF_VSOCK)", socket(AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT);
	bad += want_errno("socket(AF_PACKET)", socket(AF_PACKET, SOCK_RAW, 0), EAFNOSUPPORT);
	bad += want_errno("socket(AF_BLUETOOTH)", socket(31, SOCK_STREAM, 0), EAFNOSUPPORT);
	/* The kernel reads the family as an int: junk above it neither hides
	 * AF_VSOCK nor breaks AF_UNIX. */
	bad += want_errno("socket(AF_VSOCK) with junk in the upper bits",
			  syscall(SYS_socket, 0xdead00000000ul | AF_VSOCK, SOCK_STREAM, 0),
			  EAFNOSUPPORT);
	bad += want_ok("socket(AF_UNIX) with junk in the upper bits",
		       syscall(SYS_socket, 0xdead00000000ul | AF_UNIX, SOCK_STREAM, 0));
	bad += want_errno("socket(AF_NETLINK, UEVENT) with junk in the upper bits",
			  syscall(SYS_socket, AF_NETLINK, SOCK_RAW,
				  0xdead00000000ul | NETLINK_KOBJECT_UEVENT),
			  EPROTONOSUPPORT);
	bad += want_ok("socketpair(AF_UNIX)", socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	/* Unfiltered, AF_INET socketpair is EOPNOTSUPP. */
	bad += want_errno("socketpair(AF_INET)", socketpair(AF_INET, SOCK_STREAM, 0, sv),
			  EAFNOSUPPORT);
	return bad ? 1 : 0;
}

/* Control: unfiltered, the uevent socket opens (and vsock when the host
 * has it), so the filtered answers are the filter's. */
static int child_socket_unfiltered(void)
{
	int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT);

	if (fd < 0) {
		fprintf(stderr, "unfiltered uevent socket: %s\n", strerror(errno));
		return 1;
	}
	if (socket(AF_VSOCK, SOCK_STREAM, 0) < 0)
		print_message("note: no AF_VSOCK on this host (%s)\n", strerror(errno));
	return 0;
}

static void test_socket(void **state)
{
	(void)state;
	assert_status_ok(run_child(child_socket_unfiltered, false));
	assert_child_ok(child_socket);
}

static int child_prlimit(void)
{
	struct rlimit r;
	int bad = 0;

	bad += want_ok("prlimit(0, get)", prlimit(0, RLIMIT_NOFILE, NULL, &r));
	bad += want_ok("setrlimit (prlimit64 pid 0)", setrlimit(RLIMIT_NOFILE, &r));
	/* Unfiltered, the parent (same uid) would answer success. */
	bad += want_errno("prlimit(parent, get)", prlimit(getppid(), RLIMIT_NOFILE, NULL, &r),
			  EPERM);
	bad += want_errno("prlimit(parent, set)", prlimit(getppid(), RLIMIT_NOFILE, &r, NULL),
			  EPERM);
	bad += want_errno("prlimit(1, set)", prlimit(1, RLIMIT_FSIZE, &r, NULL), EPERM);
	return bad ? 1 : 0;
}

static void test_prlimit(void **state)
{
	(void)state;
	assert_child_ok(child_prlimit);
}

static int child_modern(void)
{
	struct open_how how = {.flags = O_RDONLY};
	char p[] = "/tmp/sbx-test-seccomp-modern-XXXXXX";
	struct stat st;
	int fd, bad = 0;
	long v;

	bad += want_ok("memfd_create", memfd_create("x", MFD_CLOEXEC));
	bad += want_ok("statx", statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS, &(struct statx){0}));
	bad += want_ok("getrandom", getrandom((char[8]){0}, 8, 0));
	bad += want_ok("openat2", syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how)));
	bad += want_ok("faccessat2", syscall(SYS_faccessat2, AT_FDCWD, "/", R_OK, 0));
	bad += want_ok("pidfd_open", syscall(SYS_pidfd_open, getpid(), 0));
	bad += want_ok("close_range", close_range(1000, 2000, 0));
	fd = mkstemp(p);
	bad += want_ok("mkstemp", fd);
	/* fchmodat2 (452), newer than libseccomp 2.5.4, is allowed by number. */
	errno = 0;
	v = syscall(NR_FCHMODAT2, AT_FDCWD, p, 0600, 0);
	if (v != 0 && errno != ENOSYS)
		bad += want_ok("fchmodat2", v);
	if (v == 0 && (stat(p, &st) != 0 || (st.st_mode & 0777) != 0600))
		bad++;
	unlink(p);
	/* landlock: version query; EOPNOTSUPP when the kernel has it off. */
	errno = 0;
	v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (v < 0 && errno != EOPNOTSUPP)
		bad += want_ok("landlock_create_ruleset(version)", v);
	return bad ? 1 : 0;
}

static void test_modern(void **state)
{
	(void)state;
	assert_child_ok(child_modern);
}

static int child_io_uring(void)
{
	/* Widened: the kernel answers (EFAULT for the NULL params). */
	errno = 0;
	if (syscall(SYS_io_uring_setup, 1, NULL) == -1 && errno == EPERM) {
		fprintf(stderr, "io_uring_setup refused although widened\n");
		return 1;
	}
	return want_errno("getcwd (narrowed)", syscall(SYS_getcwd, (char[64]){0}, 64), EPERM);
}

static void test_widen_narrow(void **state)
{
	static const char *const allow[] = {"io_uring_setup", NULL};
	static const char *const deny[] = {"getcwd", "clone3", NULL};
	sbx_seccomp_entry *v;
	struct sock_fprog *p;
	sbx_err err = {0};
	size_t n, i;
	int seen = 0;

	(void)state;
	v = sbx_seccomp_profile(deny, allow, &n, &err);
	if (!v)
		fail_msg("profile: %s", err.msg);
	assert_string_equal(sbx_seccomp_arch(), "x86_64");
	for (i = 0; i < n; i++) {
		const sbx_seccomp_entry *e = &v[i];

		if (i > 0)
			assert_true(e->nr > v[i - 1].nr);
		if (strcmp(e->name, "io_uring_setup") == 0) {
			assert_int_equal(e->action, SBX_SC_ALLOWED);
			assert_true(e->widenable);
			seen++;
		} else if (strcmp(e->name, "io_uring_enter") == 0) {
			assert_int_equal(e->action, SBX_SC_REFUSED);
			assert_int_equal(e->err, EPERM);
			assert_true(e->widenable);
			seen++;
		} else if (strcmp(e->name, "getcwd") == 0) {
			assert_int_equal(e->action, SBX_SC_REFUSED);
			assert_int_equal(e->err, EPERM);
			seen++;
		} else if (strcmp(e->name, "clone3") == 0) {
			/* narrowing keeps a refusal's errno: glibc needs ENOSYS */
			assert_int_equal(e->err, ENOSYS);
			seen++;
		} else if (strcmp(e->name, "socket") == 0) {
			assert_int_equal(e->action, SBX_SC_ARGS);
			assert_non_null(e->rule);
			seen++;
		} else if (strcmp(e->name, "mseal") == 0) {
			assert_int_equal(e->action, SBX_SC_REFUSED);
			assert_int_equal(e->err, ENOSYS);
			seen++;
		}
	}
	free(v);
	assert_int_equal(seen, 6);
	p = sbx_seccomp_compile(deny, allow, &err);
	if (!p)
		fail_msg("compile: %s", err.msg);
	assert_status_ok(run_child_with(child_io_uring, p));
	sbx_seccomp_free(p);
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
		cmocka_unit_test(test_new_syscalls),
		cmocka_unit_test(test_socket),
		cmocka_unit_test(test_prlimit),
		cmocka_unit_test(test_modern),
		cmocka_unit_test(test_widen_narrow),
		cmocka_unit_test(test_x32_killed),
#if defined(__x86_64__)
		cmocka_unit_test(test_int80_killed),
#endif
	};

	int failed =
		cmocka_run_group_tests_name("whole filter", tests, group_setup, group_teardown);
	return failed + cmocka_run_group_tests_name("init and run stages", tests,
						    group_setup_staged, group_teardown);
}
