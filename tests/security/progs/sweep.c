/*
 * sweep.c: call each dangerous syscall once, in its own child, and print
 * "RESULT <name> <outcome>" where outcome is "ok" (the call succeeded),
 * an errno name (EPERM, ENOSYS, EFAULT, ...) or "killed:<SIGNAME>".
 *
 * Used by tests/spec/isolation_spec.lua, inside a sandbox run.  Where it can,
 * each call is made with arguments the kernel itself would reject with a
 * DIFFERENT errno than EPERM (a bad pointer, a bad fd, an unknown command)
 * or would accept (a harmless new user namespace, an io_uring, a user-mode
 * userfaultfd): so EPERM/ENOSYS means the seccomp filter answered, not the
 * kernel's own permission checks.  Nothing here is harmful when it succeeds:
 * every call that could change the host is made with invalid arguments.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#ifndef CLONE_NEWUSER
#define CLONE_NEWUSER 0x10000000
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_fsmount
#define SYS_fsmount 432
#endif
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_io_uring_enter
#define SYS_io_uring_enter 426
#endif
#ifndef SYS_io_uring_register
#define SYS_io_uring_register 427
#endif
#define BAD ((void *)1)

/* Each case returns the raw syscall result; the child exits with errno. */
typedef long (*case_fn)(void);

static long c_unshare_user(void)
{
	return syscall(SYS_unshare, CLONE_NEWUSER);
}
static long c_unshare_mnt(void)
{
	return syscall(SYS_unshare, CLONE_NEWNS);
}
static long c_unshare_net(void)
{
	return syscall(SYS_unshare, CLONE_NEWNET);
}

static long c_clone_newuser(void)
{
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return pid < 0 ? -1 : 0;
}

static long c_clone3_newuser(void)
{
	uint64_t args[11] = {0};
	args[0] = CLONE_NEWUSER; /* flags */
	args[4] = SIGCHLD;	 /* exit_signal */
	long pid = syscall(SYS_clone3, args, 88);
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return pid < 0 ? -1 : 0;
}

/* fd 999 is not open: without a filter the kernel says EBADF. */
static long c_setns(void)
{
	return syscall(SYS_setns, 999, 0);
}
/* A bad fstype pointer: the kernel copies it first and says EFAULT. */
static long c_mount(void)
{
	return syscall(SYS_mount, "none", "/tmp", BAD, 0, NULL);
}
/* Unknown flags: the kernel says EINVAL before any permission check. */
static long c_umount2(void)
{
	return syscall(SYS_umount2, "/tmp", 0xffff0);
}
static long c_pivot_root(void)
{
	return syscall(SYS_pivot_root, "/tmp", "/tmp");
}
static long c_fsopen(void)
{
	return syscall(SYS_fsopen, "tmpfs", 0);
}
static long c_fsmount(void)
{
	return syscall(SYS_fsmount, 999, 0, 0);
}
static long c_open_tree(void)
{
	return syscall(SYS_open_tree, AT_FDCWD, "/tmp", 1 /* OPEN_TREE_CLONE */);
}
static long c_move_mount(void)
{
	return syscall(SYS_move_mount, 999, "", 999, "", 0);
}
/* Unknown keyctl command: EOPNOTSUPP from the kernel. */
static long c_keyctl(void)
{
	return syscall(SYS_keyctl, 9999, 0, 0, 0, 0);
}
static long c_add_key(void)
{
	return syscall(SYS_add_key, BAD, BAD, NULL, 0, 0);
}
static long c_request_key(void)
{
	return syscall(SYS_request_key, BAD, BAD, NULL, 0);
}
static long c_bpf(void)
{
	return syscall(SYS_bpf, 0 /* MAP_CREATE */, BAD, 0);
}

static long c_perf_event_open(void)
{
	struct perf_event_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = 1; /* too small: the kernel says E2BIG before its own checks */
	return syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
}

static long c_io_uring_setup(void)
{
	char params[120];
	memset(params, 0, sizeof params);
	return syscall(SYS_io_uring_setup, 1, params);
}
static long c_io_uring_enter(void)
{
	return syscall(SYS_io_uring_enter, 999, 0, 0, 0, NULL, 0);
}
static long c_io_uring_register(void)
{
	return syscall(SYS_io_uring_register, 999, 0, NULL, 0);
}
static long c_open_by_handle_at(void)
{
	return syscall(SYS_open_by_handle_at, AT_FDCWD, BAD, 0);
}
/* UFFD_USER_MODE_ONLY is allowed unprivileged: only a filter refuses it. */
static long c_userfaultfd(void)
{
	return syscall(SYS_userfaultfd, 1);
}
static long c_init_module(void)
{
	return syscall(SYS_init_module, BAD, 0, "");
}
static long c_finit_module(void)
{
	return syscall(SYS_finit_module, 999, "", 0);
}
static long c_delete_module(void)
{
	return syscall(SYS_delete_module, "sbx_no_such_module", 0);
}
static long c_kexec_load(void)
{
	return syscall(SYS_kexec_load, 0, 0, NULL, 0);
}
static long c_kexec_file_load(void)
{
	return syscall(SYS_kexec_file_load, 999, 999, 0, "", 0);
}
static long c_swapon(void)
{
	return syscall(SYS_swapon, BAD, 0);
}
static long c_swapoff(void)
{
	return syscall(SYS_swapoff, BAD);
}
static long c_acct(void)
{
	return syscall(SYS_acct, BAD);
}
/* SYSLOG_ACTION_SIZE_BUFFER (10). */
static long c_syslog(void)
{
	return syscall(SYS_syslog, 10, NULL, 0);
}
/* Bad magic: the kernel would say EINVAL; never a valid reboot. */
static long c_reboot(void)
{
	return syscall(SYS_reboot, 0, 0, 0, NULL);
}

/* A child of ours, same uid: without a filter, attaching to it succeeds. */
static pid_t spawn_victim(void)
{
	pid_t v = fork();
	if (v == 0) {
		for (;;)
			pause();
	}
	return v;
}

static long c_ptrace_attach(void)
{
	pid_t v = spawn_victim();
	long rc = syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, v, 0, 0);
	int e = errno;
	kill(v, SIGKILL);
	waitpid(v, NULL, 0);
	errno = e;
	return rc;
}

static long c_process_vm_readv(void)
{
	static char buf[16];
	pid_t v = spawn_victim();
	struct iovec local = {buf, sizeof buf}, remote = {buf, sizeof buf};
	long rc = syscall(SYS_process_vm_readv, v, &local, 1, &remote, 1, 0);
	int e = errno;
	kill(v, SIGKILL);
	waitpid(v, NULL, 0);
	errno = e;
	return rc < 0 ? -1 : 0;
}

/* Open a pty pair and make its slave our controlling terminal. */
static int ctty(void)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
		return -2;
	setsid();
	int sl = open(ptsname(m), O_RDWR);
	if (sl < 0)
		return -2;
	ioctl(sl, TIOCSCTTY, 0);
	return sl;
}

/* With dev.tty.legacy_tiocsti=1 and the pty as controlling tty, the
 * kernel would accept this: only a filter refuses it. */
static long c_tiocsti(void)
{
	int sl = ctty();
	if (sl == -2) {
		errno = ENODEV;
		return -1;
	}
	char ch = 'x';
	return ioctl(sl, TIOCSTI, &ch);
}

static long c_tioclinux(void)
{
	int sl = ctty();
	if (sl == -2) {
		errno = ENODEV;
		return -1;
	}
	char sub = 12; /* TIOCL_GETSHIFTSTATE */
	return ioctl(sl, TIOCLINUX, &sub);
}

static const struct {
	const char *name;
	case_fn fn;
} cases[] = {
	{"unshare_newuser", c_unshare_user},
	{"unshare_newns", c_unshare_mnt},
	{"unshare_newnet", c_unshare_net},
	{"clone_newuser", c_clone_newuser},
	{"clone3_newuser", c_clone3_newuser},
	{"setns", c_setns},
	{"mount", c_mount},
	{"umount2", c_umount2},
	{"pivot_root", c_pivot_root},
	{"fsopen", c_fsopen},
	{"fsmount", c_fsmount},
	{"open_tree", c_open_tree},
	{"move_mount", c_move_mount},
	{"keyctl", c_keyctl},
	{"add_key", c_add_key},
	{"request_key", c_request_key},
	{"bpf", c_bpf},
	{"perf_event_open", c_perf_event_open},
	{"io_uring_setup", c_io_uring_setup},
	{"io_uring_enter", c_io_uring_enter},
	{"io_uring_register", c_io_uring_register},
	{"open_by_handle_at", c_open_by_handle_at},
	{"userfaultfd", c_userfaultfd},
	{"init_module", c_init_module},
	{"finit_module", c_finit_module},
	{"delete_module", c_delete_module},
	{"kexec_load", c_kexec_load},
	{"kexec_file_load", c_kexec_file_load},
	{"swapon", c_swapon},
	{"swapoff", c_swapoff},
	{"acct", c_acct},
	{"syslog", c_syslog},
	{"reboot", c_reboot},
	{"ptrace_attach", c_ptrace_attach},
	{"process_vm_readv", c_process_vm_readv},
	{"ioctl_tiocsti", c_tiocsti},
	{"ioctl_tioclinux", c_tioclinux},
};

int main(int argc, char **argv)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
			continue;
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			printf("RESULT %s fork-failed\n", cases[i].name);
			continue;
		}
		if (pid == 0) {
			errno = 0;
			long rc = cases[i].fn();
			_exit(rc < 0 ? (errno ? errno : 255) : 0);
		}
		int st;
		waitpid(pid, &st, 0);
		if (WIFSIGNALED(st))
			printf("RESULT %s killed:SIG%s\n", cases[i].name,
			       sigabbrev_np(WTERMSIG(st)));
		else if (WEXITSTATUS(st) == 0)
			printf("RESULT %s ok\n", cases[i].name);
		else
			printf("RESULT %s %s\n", cases[i].name,
			       strerrorname_np(WEXITSTATUS(st)) ?: "E?");
	}
	return 0;
}
