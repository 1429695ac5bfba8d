/*
 * test_files.c: sbx_file_put / sbx_file_get against a real directory tree.
 *
 * Each test gets a fresh temp dir holding "work" (what the functions are
 * confined to) and "outside" (what an escape would reach, with a file
 * "secret" in it).  The escapes are really attempted: every test would
 * fail if a symlink, "..", a FIFO or a device got through.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "sbx.h"

#define MAX (1024 * 1024)
#define SECRET "top secret\n"

struct fx {
	char base[64];
	char work[96];
	char outside[96];
	int wfd; /* O_PATH, as the session hands it over */
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char p[160];
	int fd;

	assert_non_null(fx);
	strcpy(fx->base, "/tmp/sbx-test-files-XXXXXX");
	assert_non_null(mkdtemp(fx->base));
	snprintf(fx->work, sizeof(fx->work), "%s/work", fx->base);
	snprintf(fx->outside, sizeof(fx->outside), "%s/outside", fx->base);
	assert_int_equal(mkdir(fx->work, 0755), 0);
	assert_int_equal(mkdir(fx->outside, 0755), 0);
	snprintf(p, sizeof(p), "%s/secret", fx->outside);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, SECRET, strlen(SECRET)), (ssize_t)strlen(SECRET));
	close(fd);
	fx->wfd = open(fx->work, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(fx->wfd >= 0);
	*state = fx;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	alarm(0);
	close(fx->wfd);
	nftw(fx->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return 0;
}

/* ---- helpers working on the tree directly (not through files.c) ---- */

static void put_raw(struct fx *fx, const char *rel, const char *content)
{
	int fd = openat(fx->wfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
}

static void link_raw(struct fx *fx, const char *target, const char *rel)
{
	assert_int_equal(symlinkat(target, fx->wfd, rel), 0);
}

static char *outside_path(struct fx *fx, const char *name)
{
	static char p[192];

	snprintf(p, sizeof(p), "%s/%s", fx->outside, name);
	return p;
}

static void assert_secret_intact(struct fx *fx)
{
	char buf[64] = {0};
	int fd = open(outside_path(fx, "secret"), O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf) - 1), (ssize_t)strlen(SECRET));
	close(fd);
	assert_string_equal(buf, SECRET);
}

static void assert_outside_absent(struct fx *fx, const char *name)
{
	struct stat st;

	if (lstat(outside_path(fx, name), &st) == 0)
		fail_msg("%s was created outside the work dir", name);
}

static int put(struct fx *fx, const char *path, const char *data, sbx_err *err)
{
	return sbx_file_put(fx->wfd, path, strlen(path), data, strlen(data), MAX, getuid(),
			    getgid(), err);
}

/* get must succeed and return exactly `want`. */
static void assert_get(struct fx *fx, const char *path, const char *want)
{
	sbx_err err = {0};
	char *out = NULL;
	size_t len = 0;

	if (sbx_file_get(fx->wfd, path, strlen(path), MAX, &out, &len, &err) != 0)
		fail_msg("get %s: %s", path, err.msg);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(out, want, len);
	free(out);
}

static void assert_msg(const sbx_err *err, const char *want)
{
	assert_int_equal(err->kind, SBX_E_INVALID_ARGUMENT);
	if (!strstr(err->msg, want))
		fail_msg("message \"%s\" does not say \"%s\"", err->msg, want);
}

static void assert_put_refused(struct fx *fx, const char *path, const char *why)
{
	sbx_err err = {0};

	assert_int_equal(put(fx, path, "x", &err), -1);
	assert_msg(&err, why);
}

static void assert_get_refused(struct fx *fx, const char *path, const char *why)
{
	sbx_err err = {0};
	char *out = (char *)1;
	size_t len = 7;

	assert_int_equal(sbx_file_get(fx->wfd, path, strlen(path), MAX, &out, &len, &err), -1);
	assert_null(out);
	assert_int_equal(len, 0);
	assert_msg(&err, why);
}

/* No ".sbx-put-*" temp file may be left anywhere under dir. */
static void assert_no_temp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, ".sbx-put-", 9) == 0)
			fail_msg("temp file %s/%s left behind", dir, e->d_name);
	}
	closedir(d);
}

/* ---- the tests ---- */

static void test_round_trip(void **state)
{
	struct fx *fx = *state;
	sbx_err err = {0};
	struct stat st;

	assert_int_equal(put(fx, "hello.txt", "hello, world\n", &err), 0);
	assert_get(fx, "hello.txt", "hello, world\n");
	assert_get(fx, "./hello.txt", "hello, world\n");
	assert_int_equal(fstatat(fx->wfd, "hello.txt", &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_no_temp(fx->work);
}

static void test_binary_and_empty(void **state)
{
	struct fx *fx = *state;
	static const char bin[] = "a\0b\0\xff\x00z";
	sbx_err err = {0};
	char *out = NULL;
	size_t len = 99;

	assert_int_equal(
		sbx_file_put(fx->wfd, "bin", 3, bin, sizeof(bin), MAX, getuid(), getgid(), &err),
		0);
	assert_int_equal(sbx_file_get(fx->wfd, "bin", 3, MAX, &out, &len, &err), 0);
	assert_int_equal(len, sizeof(bin));
	assert_memory_equal(out, bin, sizeof(bin));
	free(out);

	assert_int_equal(sbx_file_put(fx->wfd, "empty", 5, NULL, 0, MAX, getuid(), getgid(), &err),
			 0);
	assert_int_equal(sbx_file_get(fx->wfd, "empty", 5, MAX, &out, &len, &err), 0);
	assert_non_null(out);
	assert_int_equal(len, 0);
	free(out);
}

static void test_atomic_replace(void **state)
{
	struct fx *fx = *state;
	sbx_err err = {0};
	char buf[16] = {0};
	int old;

	assert_int_equal(put(fx, "f", "old content", &err), 0);
	old = openat(fx->wfd, "f", O_RDONLY);
	assert_true(old >= 0);
	assert_int_equal(put(fx, "f", "new", &err), 0);
	/* A reader that had the old file keeps seeing all of it: the new
	 * content arrived by rename, never by truncating in place. */
	assert_int_equal(pread(old, buf, sizeof(buf) - 1, 0), 11);
	assert_string_equal(buf, "old content");
	close(old);
	assert_get(fx, "f", "new");
	assert_no_temp(fx->work);

	/* Nor through a hardlink: the other name keeps the old content. */
	put_raw(fx, "orig", "one");
	assert_int_equal(linkat(fx->wfd, "orig", fx->wfd, "hard", 0), 0);
	assert_int_equal(put(fx, "hard", "two", &err), 0);
	assert_get(fx, "orig", "one");
	assert_get(fx, "hard", "two");
}

static void test_parents_created(void **state)
{
	struct fx *fx = *state;
	sbx_err err = {0};
	struct stat st;
	mode_t um = umask(077);
	int rc = put(fx, "a/b//c/./d.txt", "deep", &err);

	umask(um);
	if (rc != 0)
		fail_msg("put: %s", err.msg);
	assert_get(fx, "a/b/c/d.txt", "deep");
	/* Modes are ours, not the umask's. */
	assert_int_equal(fstatat(fx->wfd, "a", &st, 0), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(fstatat(fx->wfd, "a/b/c", &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(fstatat(fx->wfd, "a/b/c/d.txt", &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	/* A second put into the existing tree works too. */
	assert_int_equal(put(fx, "a/b/e.txt", "e", &err), 0);
	assert_get(fx, "a/b/e.txt", "e");
}

static void test_parent_is_a_file(void **state)
{
	struct fx *fx = *state;

	put_raw(fx, "plain", "x");
	assert_put_refused(fx, "plain/x", "not a directory");
	assert_put_refused(fx, "plain/new/x", "not a directory");
}

static void test_target_is_a_directory(void **state)
{
	struct fx *fx = *state;

	assert_int_equal(mkdirat(fx->wfd, "d", 0755), 0);
	assert_int_equal(mkdirat(fx->wfd, "full", 0755), 0);
	put_raw(fx, "full/x", "x");
	assert_put_refused(fx, "d", "directory");
	assert_put_refused(fx, "full", "directory");
	assert_put_refused(fx, "d/", "directory");
	assert_put_refused(fx, "d/.", "directory");
	assert_put_refused(fx, ".", "directory");
	assert_no_temp(fx->work);
}

static void test_bad_paths_refused(void **state)
{
	struct fx *fx = *state;
	static const char nul[] = "ok\0../outside/x";
	char longname[NAME_MAX + 2];
	sbx_err err = {0};
	char *out = NULL;
	size_t len;

	assert_put_refused(fx, "../outside/x", "'..'");
	assert_put_refused(fx, "a/../../outside/x", "'..'");
	assert_put_refused(fx, outside_path(fx, "x"), "absolute");
	assert_get_refused(fx, "../outside/secret", "'..'");
	assert_get_refused(fx, outside_path(fx, "secret"), "absolute");
	assert_get_refused(fx, "", "empty");

	assert_int_equal(
		sbx_file_put(fx->wfd, nul, sizeof(nul) - 1, "x", 1, MAX, getuid(), getgid(), &err),
		-1);
	assert_msg(&err, "NUL");
	assert_int_equal(sbx_file_get(fx->wfd, nul, sizeof(nul) - 1, MAX, &out, &len, &err), -1);
	assert_msg(&err, "NUL");
	assert_null(out);

	memset(longname, 'n', NAME_MAX + 1);
	longname[NAME_MAX + 1] = '\0';
	assert_put_refused(fx, longname, "NAME_MAX");
	assert_get_refused(fx, longname, "NAME_MAX");

	assert_outside_absent(fx, "x");
	assert_no_temp(fx->work);
}

static void test_put_through_symlinked_dir_refused(void **state)
{
	struct fx *fx = *state;

	link_raw(fx, fx->outside, "abs");  /* absolute, to a dir outside */
	link_raw(fx, "../outside", "rel"); /* relative, to the same */
	assert_int_equal(mkdirat(fx->wfd, "sub", 0755), 0);
	link_raw(fx, "../../outside", "sub/deep");
	link_raw(fx, "/", "root");

	assert_put_refused(fx, "abs/x", "escapes");
	assert_put_refused(fx, "abs/newdir/x", "escapes");
	assert_put_refused(fx, "rel/x", "escapes");
	assert_put_refused(fx, "rel/newdir/x", "escapes");
	assert_put_refused(fx, "sub/deep/x", "escapes");
	assert_put_refused(fx, "root/tmp/sbx-escape", "escapes");
	assert_outside_absent(fx, "x");
	assert_outside_absent(fx, "newdir");
	assert_int_equal(access("/tmp/sbx-escape", F_OK), -1);
}

static void test_put_replaces_final_symlink(void **state)
{
	struct fx *fx = *state;
	sbx_err err = {0};
	struct stat st;

	link_raw(fx, outside_path(fx, "secret"), "abs");
	link_raw(fx, "../outside/secret", "rel");
	put_raw(fx, "real.txt", "real");
	link_raw(fx, "real.txt", "inside");
	link_raw(fx, outside_path(fx, "new"), "dangling");

	/* The link is replaced by the file; what it pointed to is untouched. */
	assert_int_equal(put(fx, "abs", "A", &err), 0);
	assert_int_equal(put(fx, "rel", "R", &err), 0);
	assert_int_equal(put(fx, "inside", "I", &err), 0);
	assert_int_equal(put(fx, "dangling", "D", &err), 0);
	assert_secret_intact(fx);
	assert_outside_absent(fx, "new");
	assert_get(fx, "real.txt", "real");
	assert_int_equal(fstatat(fx->wfd, "abs", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_get(fx, "abs", "A");
	assert_get(fx, "rel", "R");
	assert_get(fx, "inside", "I");
	assert_get(fx, "dangling", "D");
}

static void test_put_through_inner_symlink(void **state)
{
	struct fx *fx = *state;
	sbx_err err = {0};

	assert_int_equal(mkdirat(fx->wfd, "sub", 0755), 0);
	assert_int_equal(mkdirat(fx->wfd, "other", 0755), 0);
	link_raw(fx, "sub", "inner");
	link_raw(fx, "../sub", "other/up"); /* ".." that stays inside */
	assert_int_equal(put(fx, "inner/x", "via link", &err), 0);
	assert_get(fx, "sub/x", "via link");
	assert_int_equal(put(fx, "other/up/y/z", "made beneath", &err), 0);
	assert_get(fx, "sub/y/z", "made beneath");
}

static void test_get_escapes_refused(void **state)
{
	struct fx *fx = *state;

	link_raw(fx, "/etc/passwd", "passwd");
	link_raw(fx, outside_path(fx, "secret"), "abs");
	link_raw(fx, "../outside/secret", "rel");
	link_raw(fx, fx->outside, "absdir");
	link_raw(fx, "../outside", "reldir");
	assert_int_equal(mkdirat(fx->wfd, "sub", 0755), 0);
	link_raw(fx, "../../outside/secret", "sub/deep");
	link_raw(fx, "/proc/self/root/etc/passwd", "magic");
	link_raw(fx, "loop", "loop");

	assert_get_refused(fx, "passwd", "escapes");
	assert_get_refused(fx, "abs", "escapes");
	assert_get_refused(fx, "rel", "escapes");
	assert_get_refused(fx, "absdir/secret", "escapes");
	assert_get_refused(fx, "reldir/secret", "escapes");
	assert_get_refused(fx, "sub/deep", "escapes");
	assert_get_refused(fx, "magic", "escapes");
	assert_get_refused(fx, "loop", "escapes");
	assert_put_refused(fx, "loop/x", "escapes");
}

static void test_get_inner_symlink_followed(void **state)
{
	struct fx *fx = *state;

	assert_int_equal(mkdirat(fx->wfd, "sub", 0755), 0);
	put_raw(fx, "sub/real.txt", "inner");
	put_raw(fx, "top.txt", "top");
	link_raw(fx, "sub/real.txt", "ok");
	link_raw(fx, "../top.txt", "sub/up");
	link_raw(fx, "sub", "subdir");
	assert_get(fx, "ok", "inner");
	assert_get(fx, "sub/up", "top");
	assert_get(fx, "subdir/real.txt", "inner");
}

static void test_missing(void **state)
{
	struct fx *fx = *state;

	assert_get_refused(fx, "nope.txt", "no such file: nope.txt");
	assert_get_refused(fx, "no/such/dir.txt", "no such file");
}

static void test_fifo_refused_without_blocking(void **state)
{
	struct fx *fx = *state;
	sbx_err err = {0};

	assert_int_equal(mkfifoat(fx->wfd, "fifo", 0644), 0);
	/* A regression would block forever in open(); die instead. */
	alarm(5);
	assert_get_refused(fx, "fifo", "a FIFO");
	/* put replaces a FIFO rather than opening it. */
	assert_int_equal(put(fx, "fifo", "now a file", &err), 0);
	alarm(0);
	assert_get(fx, "fifo", "now a file");
}

static void test_directory_refused(void **state)
{
	struct fx *fx = *state;

	assert_int_equal(mkdirat(fx->wfd, "d", 0755), 0);
	assert_get_refused(fx, "d", "a directory");
	assert_get_refused(fx, ".", "a directory");
}

static void test_device_refused(void **state)
{
	struct fx *fx = *state;

	if (mknodat(fx->wfd, "null", S_IFCHR | 0666, makedev(1, 3)) != 0) {
		print_message("mknod: %s; cannot test devices here\n", strerror(errno));
		skip();
	}
	alarm(5);
	assert_get_refused(fx, "null", "a character device");
	alarm(0);
}

static void test_socket_refused(void **state)
{
	struct fx *fx = *state;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_STREAM, 0);

	assert_true(s >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", fx->work);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	alarm(5);
	assert_get_refused(fx, "sock", "a socket");
	alarm(0);
	close(s);
}

static void test_size_caps(void **state)
{
	struct fx *fx = *state;
	sbx_err err = {0};
	char *out = NULL;
	size_t len;

	assert_int_equal(
		sbx_file_put(fx->wfd, "ten", 3, "0123456789", 10, 10, getuid(), getgid(), &err), 0);
	assert_int_equal(
		sbx_file_put(fx->wfd, "eleven", 6, "0123456789a", 11, 10, getuid(), getgid(), &err),
		-1);
	assert_msg(&err, "11 bytes, over the cap of 10 bytes");
	assert_int_equal(faccessat(fx->wfd, "eleven", F_OK, AT_SYMLINK_NOFOLLOW), -1);

	assert_int_equal(sbx_file_get(fx->wfd, "ten", 3, 10, &out, &len, &err), 0);
	assert_int_equal(len, 10);
	free(out);
	out = NULL;
	assert_int_equal(sbx_file_get(fx->wfd, "ten", 3, 9, &out, &len, &err), -1);
	assert_null(out);
	assert_msg(&err, "10 bytes, over the cap of 9 bytes");
	assert_no_temp(fx->work);
}

static void test_ownership_when_root(void **state)
{
	struct fx *fx = *state;
	const uid_t uid = SBX_DEFAULT_HOST_UID;
	const gid_t gid = SBX_DEFAULT_HOST_UID;
	sbx_err err = {0};
	struct stat st;

	if (geteuid() != 0) {
		print_message("not root: ownership is not changed, nothing to test\n");
		skip();
	}
	assert_int_equal(mkdirat(fx->wfd, "pre", 0755), 0);
	assert_int_equal(sbx_file_put(fx->wfd, "pre/new/f", 9, "x", 1, MAX, uid, gid, &err), 0);
	assert_int_equal(fstatat(fx->wfd, "pre/new/f", &st, 0), 0);
	assert_int_equal(st.st_uid, uid);
	assert_int_equal(st.st_gid, gid);
	assert_int_equal(fstatat(fx->wfd, "pre/new", &st, 0), 0);
	assert_int_equal(st.st_uid, uid);
	assert_int_equal(st.st_gid, gid);
	/* Directories that already existed keep their owner. */
	assert_int_equal(fstatat(fx->wfd, "pre", &st, 0), 0);
	assert_int_equal(st.st_uid, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_binary_and_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_atomic_replace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parents_created, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parent_is_a_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_target_is_a_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_paths_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_put_through_symlinked_dir_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_put_replaces_final_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_put_through_inner_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get_escapes_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get_inner_symlink_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fifo_refused_without_blocking, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_directory_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_socket_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_size_caps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ownership_when_root, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
