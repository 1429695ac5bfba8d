/*
 * open_peer.c: sbx-open-peer, the floor side of the session open + close
 * benchmark: only what any sandbox with namespaces and a root of its own
 * must do, as a minimal C program.  Per iteration: clone into new user,
 * mount, PID, network, IPC and UTS namespaces, write the id maps, and in
 * the child build a read-only tmpfs root holding a read-only bind of each
 * PATH given (a dir on a dir, anything else on a file), /dev with six
 * device nodes, a /proc, pivot into it, bring lo up, say ready; then the
 * parent kills and reaps it.  No state dir, no seccomp, no cgroup, no
 * warm run, no Lua.  Prints, as sbx-bench-peer does, in ms:
 *     n=200 p50=1.234 open_p50=0.987 min=... max=...
 * (p50: open + close; open_p50: until ready).  Exit 1 when it cannot
 * work here (no user namespaces).
 *
 * usage: sbx-open-peer [-n N] PATH...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <math.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void die(const char *what)
{
	dprintf(2, "sbx-open-peer: %s: %s\n", what, strerror(errno));
	_exit(1);
}

/* Read-only bind of src at dst (made first: a dir or an empty file). */
static void bind_ro(const char *src, const char *dst)
{
	struct stat st;
	struct mount_attr attr = {.attr_set =
					  MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};

	if (stat(src, &st) != 0)
		die(src);
	if (S_ISDIR(st.st_mode) ? mkdir(dst, 0755) : mknod(dst, S_IFREG | 0644, 0))
		if (errno != EEXIST)
			die(dst);
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0 ||
	    syscall(SYS_mount_setattr, AT_FDCWD, dst, 0, &attr, sizeof(attr)) != 0)
		die(dst);
}

/* mkdir -p of the parent of path. */
static void parents(const char *path)
{
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST)
				die(buf);
			*p = '/';
		}
}

static void child(int sync_fd, int ready_fd, char **paths, int npaths)
{
	static const char *const dev[] = {"null", "zero", "full", "random", "urandom", "tty"};
	char c, src[4096], dst[4096];

	if (read(sync_fd, &c, 1) != 1)
		_exit(1);
	if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) != 0 ||
	    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0 ||
	    chdir("/tmp") != 0 || mkdir("newroot", 0755) != 0 || mkdir("oldroot", 0755) != 0 ||
	    mount("tmpfs", "newroot", "tmpfs", MS_NOSUID | MS_NODEV, "size=4m") != 0 ||
	    syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot") != 0 || chdir("/") != 0)
		die("scratch root");
	for (int i = 0; i < npaths; i++) {
		snprintf(src, sizeof(src), "/oldroot%s", paths[i]);
		snprintf(dst, sizeof(dst), "/newroot%s", paths[i]);
		parents(dst);
		bind_ro(src, dst);
	}
	if (mkdir("/newroot/dev", 0755) != 0 ||
	    mount("tmpfs", "/newroot/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k") != 0)
		die("/dev");
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
		snprintf(src, sizeof(src), "/oldroot/dev/%s", dev[i]);
		snprintf(dst, sizeof(dst), "/newroot/dev/%s", dev[i]);
		bind_ro(src, dst);
	}
	if (mkdir("/newroot/proc", 0555) != 0 ||
	    mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		die("/proc");
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	ifr.ifr_flags = IFF_UP | IFF_RUNNING;
	if (s < 0 || ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
		die("lo up");
	close(s);
	if (chdir("/newroot") != 0 || syscall(SYS_pivot_root, ".", ".") != 0 ||
	    umount2(".", MNT_DETACH) != 0 || chdir("/") != 0 ||
	    mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) !=
		    0)
		die("pivot");
	if (write(ready_fd, "r", 1) != 1)
		_exit(1);
	pause();
	_exit(0);
}

static void write_file(pid_t pid, const char *name, const char *text)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		die(path);
	close(fd);
}

/* One open + close; *open_ms the time until the child was ready. */
static double once(char **paths, int npaths, double *open_ms)
{
	int sync[2], ready[2];
	char map[64], c;
	struct clone_args args;
	double t0 = now_ms();

	if (pipe2(sync, O_CLOEXEC) != 0 || pipe2(ready, O_CLOEXEC) != 0)
		die("pipe");
	memset(&args, 0, sizeof(args));
	args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
		     CLONE_NEWUTS;
	args.exit_signal = SIGCHLD;
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0)
		die("clone3");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		child(sync[0], ready[1], paths, npaths);
	}
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)geteuid());
	write_file(pid, "uid_map", map);
	write_file(pid, "setgroups", "deny");
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)getegid());
	write_file(pid, "gid_map", map);
	if (write(sync[1], "x", 1) != 1)
		die("sync");
	int ok = read(ready[0], &c, 1) == 1;
	*open_ms = now_ms() - t0;
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	for (int i = 0; i < 2; i++) {
		close(sync[i]);
		close(ready[i]);
	}
	if (!ok) {
		dprintf(2, "sbx-open-peer: the child failed\n");
		exit(1);
	}
	return now_ms() - t0;
}

int main(int argc, char **argv)
{
	int n = 200, i = 1;

	if (argc > 2 && !strcmp(argv[1], "-n")) {
		n = atoi(argv[2]);
		i = 3;
	}
	if (n < 1) {
		fprintf(stderr, "usage: sbx-open-peer [-n N] PATH...\n");
		return 2;
	}
	double *all = calloc((size_t)n, sizeof(double)), *open = calloc((size_t)n, sizeof(double));
	if (!all || !open)
		return 1;
	for (int k = 0; k < n; k++)
		all[k] = once(argv + i, argc - i, &open[k]);
	qsort(all, (size_t)n, sizeof(double), cmp_double);
	qsort(open, (size_t)n, sizeof(double), cmp_double);
	printf("n=%d p50=%.3f open_p50=%.3f min=%.3f max=%.3f\n", n, all[(n - 1) / 2],
	       open[(n - 1) / 2], all[0], all[n - 1]);
	free(all);
	free(open);
	return 0;
}
