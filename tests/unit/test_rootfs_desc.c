/*
 * test_rootfs_desc.c: one root filesystem description (rootfs_desc.c),
 * rendered as bwrap arguments (rootfs_bwrap.c) and as real mounts
 * (rootfs.c), agrees entry by entry.
 *
 * A forked child (root: new mount, PID, UTS and network namespaces, as
 * backend "privileged" makes them) builds the root from the description
 * and pivots into it; then, for every entry, it renders that entry's bwrap
 * arguments and checks that the mounts did what those arguments say: a
 * --ro-bind/--bind is a mount of the same host inode, read-only or not;
 * --symlink the same link; nothing for an absent path; --ro-bind-data a
 * read-only file holding the data; --dev a tmpfs with /dev/null; --proc a
 * proc; --size N --tmpfs a tmpfs of N bytes once a run's mounts are made;
 * --remount-ro a read-only mount.  The description holds both read-only
 * and writable binds, so each direction of the read-only check is met.
 * Skipped when not root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "rootfs_desc.h"

#define TMP_BYTES (8ull << 20)
#define SHM_BYTES (4ull << 20)

static char work[] = "/var/tmp/sbx-rootfs-work-XXXXXX";
static char extra[] = "/var/tmp/sbx-rootfs-bind-XXXXXX";
static char extra_ro[PATH_MAX];
static sbx_bind binds[2];
static const char *const system_ro[] = {"/usr", "/bin", "/no/such/dir", NULL};
static const char *const etc_files[] = {"nsswitch.conf", "os-release", "hostname", "absent.conf",
					NULL};

/* Host inodes of the binds' sources, taken before the pivot hides them. */
static struct {
	dev_t dev;
	ino_t ino;
	bool present;
} host[SBX_FS_MAX_ENTRIES];

static void options(sbx_session_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->system_ro = system_ro;
	o->etc_files = etc_files;
	o->binds = binds;
	o->n_binds = 2;
	o->tmp_bytes = TMP_BYTES;
	o->shm_bytes = SHM_BYTES;
	o->hostname = "rootfs-test";
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(work) || !mkdtemp(extra))
		return -1;
	snprintf(extra_ro, sizeof(extra_ro), "%s-file", extra);
	int fd = open(extra_ro, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	close(fd);
	binds[0] = (sbx_bind){.path = extra, .writable = true};
	binds[1] = (sbx_bind){.path = extra_ro, .writable = false};
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(extra_ro);
	rmdir(extra);
	rmdir(work);
	return 0;
}

static char failure[1024];

static __attribute__((format(printf, 1, 2))) int bad(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(failure, sizeof(failure), fmt, ap);
	va_end(ap);
	return -1;
}

static bool read_only(const char *path)
{
	struct statvfs sv;
	return statvfs(path, &sv) == 0 && (sv.f_flag & ST_RDONLY);
}

/* What the mounts made for entry i agrees with its bwrap arguments. */
static int check_entry(const sbx_fs_entry *e, size_t i)
{
	sbx_argv a = {0};
	struct stat st;
	struct statfs sf;
	char buf[4096];
	int rc = 0;

	if (sbx_rootfs_bwrap_entry(&a, e, 7) < 0)
		return bad("entry %zu: no bwrap rendering", i);
	const char *op = a.n ? a.v[0] : "(nothing)";
	if (a.n == 0) {
		/* bwrap skips an absent path: so must the mounts. */
		if (lstat(e->dst, &st) == 0)
			rc = bad("%s: bwrap skips it, the mounts made it", e->dst);
	} else if (!strcmp(op, "--ro-bind") || !strcmp(op, "--bind")) {
		bool want_ro = !strcmp(op, "--ro-bind");
		if (strcmp(a.v[1], e->src) || strcmp(a.v[2], e->dst))
			rc = bad("%s: bwrap binds %s at %s", e->dst, a.v[1], a.v[2]);
		else if (stat(e->dst, &st) != 0 || !host[i].present || st.st_dev != host[i].dev ||
			 st.st_ino != host[i].ino)
			rc = bad("%s: not the host's %s", e->dst, e->src);
		else if (read_only(e->dst) != want_ro)
			rc = bad("%s: bwrap says %s, the mount is read-%s", e->dst, op,
				 want_ro ? "write" : "only");
	} else if (!strcmp(op, "--symlink")) {
		ssize_t n = readlink(e->dst, buf, sizeof(buf) - 1);
		if (n < 0 || (buf[n] = '\0', strcmp(buf, a.v[1])) || strcmp(a.v[2], e->dst))
			rc = bad("%s: bwrap links it to %s, the mounts did not", e->dst, a.v[1]);
	} else if (!strcmp(op, "--ro-bind-data")) {
		int fd = open(e->dst, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n < 0 || (buf[n] = '\0', strcmp(buf, e->data)) || strcmp(a.v[1], "7"))
			rc = bad("%s: not the generated text", e->dst);
		else if (!read_only(e->dst))
			rc = bad("%s: bwrap binds it read-only, the file is writable", e->dst);
	} else if (!strcmp(op, "--dev")) {
		if (statfs(e->dst, &sf) != 0 || sf.f_type != TMPFS_MAGIC ||
		    stat("/dev/null", &st) != 0 || !S_ISCHR(st.st_mode) ||
		    lstat("/dev/pts", &st) != 0 || lstat("/dev/shm", &st) != 0)
			rc = bad("%s: not a minimal /dev", e->dst);
	} else if (!strcmp(op, "--dev-bind")) {
		if (stat(e->dst, &st) != 0 || !S_ISCHR(st.st_mode))
			rc = bad("%s: not a device node", e->dst);
	} else if (!strcmp(op, "--proc")) {
		if (statfs(e->dst, &sf) != 0 || sf.f_type != PROC_SUPER_MAGIC)
			rc = bad("%s: not a proc", e->dst);
	} else if (!strcmp(op, "--size")) {
		/* The session's root holds the mount point; each run mounts
		 * the tmpfs (checked after sbx_rootfs_run_mounts). */
		if (strcmp(a.v[2], "--tmpfs") || strcmp(a.v[3], e->dst) || stat(e->dst, &st) != 0 ||
		    !S_ISDIR(st.st_mode))
			rc = bad("%s: no tmpfs mount point", e->dst);
	} else if (!strcmp(op, "--remount-ro")) {
		if (!read_only(e->dst))
			rc = bad("%s: bwrap makes it read-only, the mount is writable", e->dst);
	} else {
		rc = bad("%s: bwrap option %s has no check here", e->dst, op);
	}
	sbx_argv_free(&a);
	return rc;
}

/* After a run's mounts: each --size N --tmpfs D is a tmpfs of N bytes. */
static int check_tmpfs(const sbx_rootfs *fs)
{
	for (size_t i = 0; i < fs->n; i++) {
		struct statfs sf;
		const sbx_fs_entry *e = &fs->e[i];
		if (e->kind != SBX_FS_TMPFS)
			continue;
		if (statfs(e->dst, &sf) != 0 || sf.f_type != TMPFS_MAGIC ||
		    (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize != e->size)
			return bad("%s: not a tmpfs of %llu bytes", e->dst,
				   (unsigned long long)e->size);
	}
	return 0;
}

/* PID 1 of the new namespaces: build, pivot, check every entry. */
static int build_and_check(const sbx_rootfs *fs)
{
	struct sbx_zygote_cfg cfg;
	sbx_err err = {0};
	size_t checked = 0;

	if (sbx_rootfs_build(fs, "rootfs-test", &err) < 0)
		return bad("build: %s", err.msg);
	for (size_t i = 0; i < fs->n; i++, checked++)
		if (check_entry(&fs->e[i], i) < 0)
			return -1;
	memset(&cfg, 0, sizeof(cfg));
	cfg.carry[0] = SBX_SANDBOX_WORKDIR;
	cfg.tmp_bytes = sbx_rootfs_tmpfs_size(fs, "/tmp");
	cfg.shm_bytes = sbx_rootfs_tmpfs_size(fs, "/dev/shm");
	if (sbx_rootfs_run_mounts(&cfg, &err) < 0)
		return bad("run mounts: %s", err.msg);
	if (check_tmpfs(fs) < 0)
		return -1;
	return checked == fs->n ? 0 : bad("checked %zu of %zu entries", checked, fs->n);
}

static void test_mounts_agree_with_bwrap_args(void **state)
{
	sbx_session_opts o;
	sbx_rootfs fs;
	sbx_err err = {0};
	int pfd[2];

	(void)state;
	if (geteuid() != 0)
		skip();
	options(&o);
	if (sbx_rootfs_describe(&fs, &o, work, NULL, 1000, 1000, &err) < 0)
		fail_msg("describe: %s", err.msg);
	for (size_t i = 0; i < fs.n; i++) {
		struct stat st;
		if (fs.e[i].src && stat(fs.e[i].src, &st) == 0)
			host[i].dev = st.st_dev, host[i].ino = st.st_ino, host[i].present = true;
	}
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWNET) != 0)
			_exit(2);
		pid_t one = fork();
		if (one == 0) {
			int rc = build_and_check(&fs);
			if (rc < 0)
				(void)!write(pfd[1], failure, strlen(failure));
			_exit(rc < 0);
		}
		int st = 0;
		while (one > 0 && waitpid(one, &st, 0) < 0 && errno == EINTR)
			;
		_exit(one > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 3);
	}
	close(pfd[1]);
	char msg[1024] = "";
	ssize_t n = read(pfd[0], msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = '\0';
	close(pfd[0]);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	sbx_rootfs_free(&fs);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("exit %d: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, msg);
}

/* The description names every kind the options ask for, in order. */
static void test_description_order(void **state)
{
	static const sbx_fs_kind
		want
			[] =
				{
					SBX_FS_BIND,
					SBX_FS_BIND,
					SBX_FS_BIND, /* system dirs */
					SBX_FS_BIND,
					SBX_FS_BIND,
					SBX_FS_BIND, /* /etc entries, hostname skipped */
					SBX_FS_DATA,
					SBX_FS_DATA,
					SBX_FS_DATA,
					SBX_FS_DATA, /* passwd group hosts hostname */
					SBX_FS_DEV,
					SBX_FS_PROC,
					SBX_FS_TMPFS,
					SBX_FS_TMPFS,
					SBX_FS_BIND,
					SBX_FS_BIND,
					SBX_FS_BIND, /* work dir, two binds */
					SBX_FS_RO_DEV,
				};
	sbx_session_opts o;
	sbx_rootfs fs;
	sbx_err err = {0};

	(void)state;
	options(&o);
	assert_int_equal(sbx_rootfs_describe(&fs, &o, work, NULL, 1000, 1000, &err), 0);
	assert_int_equal(fs.n, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < fs.n; i++)
		assert_int_equal(fs.e[i].kind, want[i]);
	assert_string_equal(fs.e[9].data, "rootfs-test\n");
	assert_int_equal(sbx_rootfs_tmpfs_size(&fs, "/tmp"), TMP_BYTES);
	assert_int_equal(sbx_rootfs_tmpfs_size(&fs, "/dev/shm"), SHM_BYTES);
	sbx_rootfs_free(&fs);
	/* A name that climbs out of /etc is refused, not described. */
	static const char *const climb[] = {"../shadow", NULL};
	o.etc_files = climb;
	assert_int_equal(sbx_rootfs_describe(&fs, &o, work, NULL, 1000, 1000, &err), -1);
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_description_order),
		cmocka_unit_test(test_mounts_agree_with_bwrap_args),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
