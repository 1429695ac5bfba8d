/*
 * test_statedir.c: removing a session's dir (sbx_statedir_remove, also the
 * dead-session sweep's walk) never leaves it, whatever its work dir holds
 * or does meanwhile.  A closed session's processes die a moment after the
 * close returns, and the walk runs as root: a directory the sandbox swaps
 * for a symlink to a host directory while the walk runs must not make the
 * walk delete that host directory's files.
 *
 *   - a tree of files, dirs, a FIFO and symlinks (one to an outside dir)
 *     goes, the outside dir's file stays (the control: it was reachable
 *     through the link);
 *   - a thread swaps a subdirectory and a symlink to an outside dir back
 *     and forth (rename(2)) while the tree is removed, many times over:
 *     the outside dir's files all stay.  (A walk by path, as nftw's was,
 *     follows the swap when it reopens the name: then files go.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "session_impl.h"

static char g_root[64];

static void make_file(const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
}

static void make_dir(const char *path)
{
	assert_int_equal(mkdir(path, 0755), 0);
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* The outside dir with n files named keep<i>; how many are left. */
static void fill_outside(const char *outside, int n)
{
	char name[32];
	make_dir(outside);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "keep%d", i);
		make_file(outside, name);
	}
}

static int count_left(const char *outside, int n)
{
	char path[512];
	int left = 0;
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/keep%d", outside, i);
		left += exists(path);
	}
	return left;
}

static int setup(void **state)
{
	(void)state;
	snprintf(g_root, sizeof(g_root), "/tmp/sbx-test-statedir.XXXXXX");
	return mkdtemp(g_root) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", g_root);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_removes_tree_not_link_targets(void **state)
{
	(void)state;
	char tree[128], sub[512], deep[512], outside[128], link[512], fifo[600], probe[512];

	snprintf(outside, sizeof(outside), "%s/outside1", g_root);
	fill_outside(outside, 3);
	snprintf(tree, sizeof(tree), "%s/session1", g_root);
	make_dir(tree);
	make_file(tree, "lock");
	snprintf(sub, sizeof(sub), "%s/work", tree);
	make_dir(sub);
	make_file(sub, "a");
	snprintf(deep, sizeof(deep), "%s/work/d1", tree);
	make_dir(deep);
	snprintf(deep, sizeof(deep), "%s/work/d1/d2", tree);
	make_dir(deep);
	make_file(deep, "b");
	snprintf(fifo, sizeof(fifo), "%s/fifo", deep);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(link, sizeof(link), "%s/work/to-outside", tree);
	assert_int_equal(symlink(outside, link), 0);
	snprintf(link, sizeof(link), "%s/work/d1/dangling", tree);
	assert_int_equal(symlink("/no/such/place", link), 0);
	/* Control: the link reaches the outside dir's files. */
	snprintf(probe, sizeof(probe), "%s/work/to-outside/keep0", tree);
	assert_true(exists(probe));

	assert_int_equal(sbx_statedir_remove(tree), 0);
	assert_false(exists(tree));
	assert_int_equal(count_left(outside, 3), 3);
}

/* The swapper: work/victim is a dir, then a symlink to outside, and back,
 * as fast as rename allows, until told to stop. */
struct swap {
	char work[256], dir[300], link[300], tmp[300];
	atomic_bool stop;
};

static void *swapper(void *arg)
{
	struct swap *w = arg;
	while (!atomic_load(&w->stop)) {
		/* dir -> tmp, link -> victim; then back. */
		(void)!rename(w->dir, w->tmp);
		(void)!rename(w->link, w->dir);
		(void)!rename(w->dir, w->link);
		(void)!rename(w->tmp, w->dir);
	}
	return NULL;
}

static void test_swap_during_walk(void **state)
{
	(void)state;
	enum { FILES = 64, ROUNDS = 300 };
	char outside[128], tree[128], name[32];
	int left = FILES;

	snprintf(outside, sizeof(outside), "%s/outside2", g_root);
	fill_outside(outside, FILES);
	for (int r = 0; r < ROUNDS && left == FILES; r++) {
		struct swap w;
		pthread_t t;

		snprintf(tree, sizeof(tree), "%s/s%d", g_root, r);
		make_dir(tree);
		snprintf(w.work, sizeof(w.work), "%s/work", tree);
		make_dir(w.work);
		snprintf(w.dir, sizeof(w.dir), "%s/victim", w.work);
		snprintf(w.link, sizeof(w.link), "%s/victim.link", w.work);
		snprintf(w.tmp, sizeof(w.tmp), "%s/victim.tmp", w.work);
		make_dir(w.dir);
		/* The same names as outside's: a walk led there unlinks them. */
		for (int i = 0; i < FILES; i++) {
			snprintf(name, sizeof(name), "keep%d", i);
			make_file(w.dir, name);
		}
		assert_int_equal(symlink(outside, w.link), 0);
		atomic_init(&w.stop, false);
		assert_int_equal(pthread_create(&t, NULL, swapper, &w), 0);
		(void)sbx_statedir_remove(tree);
		atomic_store(&w.stop, true);
		pthread_join(t, NULL);
		/* What the race left (the swap may have kept names out of the
		 * walk's sight) goes now, without the swapper. */
		(void)sbx_statedir_remove(tree);
		left = count_left(outside, FILES);
	}
	assert_int_equal(left, FILES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_removes_tree_not_link_targets),
		cmocka_unit_test(test_swap_during_walk),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
