/*
 * sys.c: thin wrappers for the syscalls glibc 2.36 does not wrap, and the
 * fd hygiene every child needs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

int sbx_sys_pidfd_send_signal(int pidfd, int sig)
{
	/* Marked as sbx's (init.c forwards nothing else to a run): SI_QUEUE
	 * is the one code another process may send with its own siginfo. */
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_int = SBX_SIG_MARK;
	return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, &si, 0);
}

bool sbx_sys_fork_retry(int *tries)
{
	if (errno != EAGAIN || *tries >= 200)
		return false;
	++*tries;
	usleep(10000);
	return true;
}

/*
 * Fork-like clone3 (no new stack: the child returns here like fork).
 * flags may add namespace bits; with pidfd_out, CLONE_PIDFD is set and the
 * parent gets a pidfd for the child.
 */
pid_t sbx_sys_clone3_fork(uint64_t flags, int *pidfd_out)
{
	struct clone_args args;
	int pidfd = -1;

	memset(&args, 0, sizeof(args));
	args.flags = flags;
	if (pidfd_out) {
		args.flags |= CLONE_PIDFD;
		args.pidfd = (uint64_t)(uintptr_t)&pidfd;
	}
	args.exit_signal = SIGCHLD;
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
	if (pid > 0 && pidfd_out)
		*pidfd_out = pidfd;
	return pid;
}

/*
 * A clone3 child of a multi-threaded host (sbxd, or any caller once a
 * memory-limited session's placer thread runs) is one thread, but glibc
 * in it still lists the host's threads: the raw clone runs none of
 * fork()'s bookkeeping.  glibc's setresuid, setresgid and setgroups
 * change the ids of every listed thread, and first wait for any thread
 * created but not started yet (its setxid_futex is -1 until it runs).
 * Cloned in that window (an open right after another session's
 * pthread_create, under load) the child waits forever for a thread that
 * is not in it: the zygote never got ready.  The child is truly one
 * thread, so the per-thread syscalls are exactly what it needs.
 */
int sbx_sys_drop_groups(void)
{
	if (syscall(SYS_setgroups, 0, NULL) != 0 && errno != EPERM)
		return -1;
	return 0;
}

int sbx_sys_set_ids(uid_t uid, gid_t gid)
{
	if (syscall(SYS_setresgid, gid, gid, gid) != 0 ||
	    syscall(SYS_setresuid, uid, uid, uid) != 0)
		return -1;
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

void sbx_close_fds_except(const int *keep, size_t n)
{
	/* The zygote keeps three fds and one per idmapped bind (idmap.c). */
	int sorted[3 + SBX_FS_MAX_ENTRIES];
	unsigned int lo = 3;

	if (n > sizeof(sorted) / sizeof(sorted[0]))
		n = sizeof(sorted) / sizeof(sorted[0]);
	memcpy(sorted, keep, n * sizeof(int));
	qsort(sorted, n, sizeof(int), cmp_int);
	for (size_t i = 0; i < n; i++) {
		if (sorted[i] < (int)lo)
			continue;
		if ((unsigned int)sorted[i] > lo)
			syscall(SYS_close_range, lo, (unsigned int)sorted[i] - 1, 0);
		lo = (unsigned int)sorted[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0U, 0);
}

int sbx_sealed_data_fd(const char *name, const void *data, size_t len)
{
	int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	if (write(fd, data, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		int e = errno ? errno : EIO;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

uint64_t sbx_monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
