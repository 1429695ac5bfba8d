/*
 * syscall_sweep.c: try every syscall the sandbox's seccomp baseline
 * refuses, from inside the sandbox, and print what each returned.
 *
 * Output: one line per attempt, "RESULT <name> <outcome>", where outcome is
 * "OK" (the call succeeded), an errno name ("EPERM", "ENOSYS", ...), or
 * "SIG<NAME>" when the attempt (made in a child) was killed.  Exits 0.
 *
 * The arguments are chosen so that each call is harmless even where it is
 * allowed and privileged (nonexistent paths, invalid flags, bad magic
 * numbers, read-only queries) and, where possible, answers something other
 * than EPERM when the filter lets it through, so the spec can tell the
 * filter's EPERM from the kernel's.  Calls that would change this process
 * (unshare, clone into namespaces, ptrace TRACEME, vhangup) run in a child.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe_report.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

/*
 * Run fn in a child and report how it went: fn returns 0 for "the call
 * succeeded" or the errno it failed with.
 */
static void in_child(const char *name, int (*fn)(void))
{
	int status;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		printf("RESULT %s fork-%s\n", name, errno_name(errno));
		return;
	}
	if (pid == 0)
		_exit(fn() & 0xff);
	if (waitpid(pid, &status, 0) != pid) {
		printf("RESULT %s wait-%s\n", name, errno_name(errno));
	} else if (WIFSIGNALED(status)) {
		const char *s = sigabbrev_np(WTERMSIG(status));

		printf("RESULT %s SIG%s\n", name, s ? s : "UNKNOWN");
	} else {
		int e = WEXITSTATUS(status);

		printf("RESULT %s %s\n", name, e == 0 ? "OK" : errno_name(e));
	}
	fflush(stdout);
}

static int call_errno(long rc)
{
	return rc == -1 ? (errno ? errno : 255) : 0;
}

static int do_unshare_user(void)
{
	return call_errno(unshare(CLONE_NEWUSER));
}
static int do_unshare_mnt(void)
{
	return call_errno(unshare(CLONE_NEWNS));
}
static int do_unshare_net(void)
{
	return call_errno(unshare(CLONE_NEWNET));
}
static int do_traceme(void)
{
	return call_errno(syscall(SYS_ptrace, 0 /* TRACEME */, 0, 0, 0));
}

static int do_vhangup(void)
{
	/* Without a controlling terminal there is nothing to hang up. */
	setsid();
	return call_errno(syscall(SYS_vhangup));
}

static unsigned long clone_flag;

static int do_clone(void)
{
	long rc = syscall(SYS_clone, clone_flag | SIGCHLD, 0, NULL, NULL, 0);

	if (rc == 0)
		_exit(0);
	if (rc > 0)
		waitpid((pid_t)rc, NULL, 0);
	return call_errno(rc);
}

static void sweep_namespaces(void)
{
	static const struct {
		const char *name;
		unsigned long flag;
	} ns[] = {
		{"clone_newuser", CLONE_NEWUSER},     {"clone_newns", CLONE_NEWNS},
		{"clone_newpid", CLONE_NEWPID},	      {"clone_newnet", CLONE_NEWNET},
		{"clone_newipc", CLONE_NEWIPC},	      {"clone_newuts", CLONE_NEWUTS},
		{"clone_newcgroup", CLONE_NEWCGROUP},
	};
	size_t i;

	in_child("unshare_newuser", do_unshare_user);
	in_child("unshare_newns", do_unshare_mnt);
	in_child("unshare_newnet", do_unshare_net);
	/* CLONE_NEWTIME is not tried with clone(): there its bit (0x80) is part
	 * of the exit signal; unshare and clone3 are the ways in. */
	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		clone_flag = ns[i].flag;
		in_child(ns[i].name, do_clone);
	}
	TRY("clone3", syscall(SYS_clone3, NULL, 0));
	TRY("setns", syscall(SYS_setns, -1, 0));
}

static void sweep_mounts(void)
{
	TRY("mount", syscall(SYS_mount, NULL, "/nonexistent-sbx-sweep", "tmpfs", 0, NULL));
	TRY("umount2", syscall(SYS_umount2, "/nonexistent-sbx-sweep", 0));
	TRY("pivot_root", syscall(SYS_pivot_root, "/nonexistent-sbx-a", "/nonexistent-sbx-b"));
	TRY("chroot", syscall(SYS_chroot, "/nonexistent-sbx-sweep"));
	TRY("fsopen", syscall(SYS_fsopen, "sbx_no_such_fs", 0));
	TRY("fsconfig", syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0));
	TRY("fsmount", syscall(SYS_fsmount, -1, 0, 0));
	TRY("fspick", syscall(SYS_fspick, AT_FDCWD, "/nonexistent-sbx-sweep", 0));
	TRY("move_mount", syscall(SYS_move_mount, AT_FDCWD, "/nonexistent-sbx-a", AT_FDCWD,
				  "/nonexistent-sbx-b", 0));
	TRY("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/nonexistent-sbx-sweep", 0));
	TRY("mount_setattr",
	    syscall(SYS_mount_setattr, AT_FDCWD, "/nonexistent-sbx-sweep", 0, NULL, 0));
}

static void sweep_kernel(void)
{
	TRY("add_key", syscall(SYS_add_key, "sbx_no_such_type", "sbx", "x", 1, -3));
	TRY("request_key", syscall(SYS_request_key, "sbx_no_such_type", "sbx", NULL, 0));
	TRY("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
	TRY("bpf", syscall(SYS_bpf, 0 /* MAP_CREATE */, NULL, 0));
	TRY("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	TRY("userfaultfd", syscall(SYS_userfaultfd, ~0u));
	TRY("fanotify_init", syscall(SYS_fanotify_init, ~0u, 0));
	TRY("lookup_dcookie", syscall(SYS_lookup_dcookie, 0, NULL, 0));
	TRY("init_module", syscall(SYS_init_module, NULL, 0, ""));
	TRY("finit_module", syscall(SYS_finit_module, -1, "", 0));
	TRY("delete_module", syscall(SYS_delete_module, "sbx_no_such_module", O_NONBLOCK));
	/* An architecture nobody has: refused before anything is loaded. */
	TRY("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0x7fff0000ul));
	TRY("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0x80000000ul));
	TRY("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
	TRY("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
	TRY("io_uring_register", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
}

static void sweep_machine(void)
{
	struct timeval bad_tv = {.tv_sec = 0, .tv_usec = -1};
	struct timespec bad_ts = {.tv_sec = 0, .tv_nsec = -1};
	struct timex tx = {.modes = 0}; /* modes 0: read only */
	char buf[64];

	TRY("swapon", syscall(SYS_swapon, "/nonexistent-sbx-sweep", 0));
	TRY("swapoff", syscall(SYS_swapoff, "/nonexistent-sbx-sweep"));
	TRY("acct", syscall(SYS_acct, "/nonexistent-sbx-sweep/acct"));
	TRY("syslog", syscall(SYS_syslog, 10 /* SIZE_BUFFER: read only */, NULL, 0));
	TRY("reboot", syscall(SYS_reboot, 0, 0, 0, NULL)); /* bad magic */
	TRY("settimeofday", syscall(SYS_settimeofday, &bad_tv, NULL));
	TRY("clock_settime", syscall(SYS_clock_settime, CLOCK_REALTIME, &bad_ts));
	TRY("clock_adjtime", syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
	TRY("adjtimex", syscall(SYS_adjtimex, &tx));
	TRY("sethostname", syscall(SYS_sethostname, NULL, 100000));
	TRY("setdomainname", syscall(SYS_setdomainname, NULL, 100000));
#if defined(__x86_64__)
	TRY("iopl", syscall(SYS_iopl, 4));
	TRY("ioperm", syscall(SYS_ioperm, 0x10000ul, 1, 0));
	TRY("modify_ldt", syscall(SYS_modify_ldt, 0, buf, sizeof(buf)));
#endif
	TRY("quotactl", syscall(SYS_quotactl, 0, NULL, 0, NULL));
	TRY("quotactl_fd", syscall(SYS_quotactl_fd, -1, 0, 0, NULL));
	TRY("nfsservctl", syscall(SYS_nfsservctl, 0, NULL, NULL));
	TRY("uselib", syscall(SYS_uselib, "/nonexistent-sbx-sweep"));
	TRY("ustat", syscall(SYS_ustat, 0, buf));
	TRY("sysfs", syscall(SYS_sysfs, 3));
	TRY("_sysctl", syscall(SYS__sysctl, NULL));
	in_child("vhangup", do_vhangup);
}

static void sweep_processes(void)
{
	char a[8] = "sbx", b[8];
	struct iovec local = {b, sizeof(b)}, remote = {a, sizeof(a)};

	in_child("ptrace_traceme", do_traceme);
	/* A pid that does not exist: ESRCH when allowed. */
	TRY("ptrace_peek", syscall(SYS_ptrace, 2 /* PEEKDATA */, 0x3ffffff0, 0, 0));
	TRY("process_vm_readv", syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0));
	TRY("process_vm_writev",
	    syscall(SYS_process_vm_writev, getpid(), &remote, 1, &local, 1, 0));
	TRY("kcmp", syscall(SYS_kcmp, getpid(), getpid(), 1 /* KCMP_VM */, 0, 0));
	TRY("pidfd_getfd", syscall(SYS_pidfd_getfd, -1, 0, 0));
	TRY("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0));
	TRY("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD, "/", NULL, NULL, 0));
	TRY("get_mempolicy", syscall(SYS_get_mempolicy, NULL, NULL, 0, NULL, 0));
	TRY("set_mempolicy", syscall(SYS_set_mempolicy, 0 /* MPOL_DEFAULT */, NULL, 0));
	TRY("set_mempolicy_home_node", syscall(SYS_set_mempolicy_home_node, 0, 0, 0, 0));
	TRY("mbind", syscall(SYS_mbind, NULL, 0, 0, NULL, 0, 0));
	TRY("migrate_pages", syscall(SYS_migrate_pages, 0x3ffffff0, 0, NULL, NULL));
	TRY("move_pages", syscall(SYS_move_pages, 0, 0, NULL, NULL, NULL, 0));
}

static void sweep_conditional(void)
{
	const char *chr = "/tmp/sbx-sweep-chr", *blk = "/tmp/sbx-sweep-blk";
	const char *fifo = "/tmp/sbx-sweep-fifo";
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	char c = 'x';
	long rc;

	rc = syscall(SYS_mknodat, AT_FDCWD, chr, S_IFCHR | 0600, makedev(1, 3));
	report("mknod_chr", rc, errno);
	if (rc == 0)
		unlink(chr);
	rc = syscall(SYS_mknodat, AT_FDCWD, blk, S_IFBLK | 0600, makedev(7, 0));
	report("mknod_blk", rc, errno);
	if (rc == 0)
		unlink(blk);
	rc = syscall(SYS_mknodat, AT_FDCWD, fifo, S_IFIFO | 0600, 0);
	report("mknod_fifo", rc, errno);
	if (rc == 0)
		unlink(fifo);

	/* On /dev/null these are ENOTTY unless the filter answers first. */
	TRY("ioctl_tiocsti", syscall(SYS_ioctl, fd, TIOCSTI, &c));
	TRY("ioctl_tiocsti_highbits", syscall(SYS_ioctl, fd, 0xdead00000000ul | TIOCSTI, &c));
	TRY("ioctl_tioclinux", syscall(SYS_ioctl, fd, TIOCLINUX, &c));
	TRY("ioctl_tcgets", syscall(SYS_ioctl, fd, TCGETS, (char[64]){0}));
	close(fd);

	TRY("personality_query", syscall(SYS_personality, 0xffffffffu));
	rc = syscall(SYS_personality, PER_LINUX32);
	report("personality_linux32", rc, errno);
	rc = syscall(SYS_personality, ADDR_NO_RANDOMIZE);
	report("personality_addr_no_randomize", rc, errno);
	syscall(SYS_personality, PER_LINUX); /* undo whatever got through */
	TRY("getpid", syscall(SYS_getpid));
}

int main(void)
{
	sweep_namespaces();
	sweep_mounts();
	sweep_kernel();
	sweep_machine();
	sweep_processes();
	sweep_conditional();
	return 0;
}
