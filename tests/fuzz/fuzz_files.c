/*
 * fuzz_files.c: libFuzzer target for the put/get path handling of files.c
 * (sbx_path_check, sbx_file_put, sbx_file_get).
 *
 * A temp tree is made once:  ROOT/work (the jail, what dirfd points at) and
 * ROOT/outside/secret (what must never be touched).  work holds links a
 * hostile sandbox would plant: up -> .., abs -> ROOT/outside, out ->
 * ../outside/secret, proc -> /proc/self/root, self -> ., loop -> loop, a
 * dir d/ with d/back -> ../.., a FIFO and a hard link.  The input is a
 * sequence of records  op(1) len(1) bytes(len):
 *   op % 4 == 0: put bytes-as-path with the rest of the record as data
 *   op % 4 == 1: get bytes-as-path
 *   op % 4 == 2: plant a symlink (as the sandbox may, between two calls):
 *                name = one of a few fixed names in work or work/d,
 *                target = the bytes (absolute, "..", anything)
 *   op % 4 == 3: sbx_path_check only
 * Properties (abort() on violation):
 *   - ROOT/outside keeps exactly its two files (secret, and linked, which
 *     is hard-linked as work/hard) with their exact content, and ROOT
 *     holds nothing but work and outside (no write escapes the jail);
 *   - get never returns the secret (puts of data holding it are skipped);
 *   - a path sbx_path_check refuses is refused by put and get too;
 *   - every failure sets an error kind and a message;
 *   - a put that succeeded is read back byte for byte by a get of the same
 *     path when no link was planted in between (or, when the path went
 *     through a link the put itself replaced, its bytes are in some regular
 *     file beneath work);
 *   - get never returns more than max_bytes.
 * The work tree is rebuilt every 64 inputs so it does not grow unbounded.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx.h"

#define SECRET "do not touch: outside the work dir\n"
#define LINKED "hard-linked into work, never written through\n"
#define MAX_BYTES 4096

static char root[256];
static char work[300];
static char outside[300];
static int workfd = -1;
static unsigned long iterations;

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_files: PROPERTY VIOLATED: %s\n", what);
	abort();
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void must(int ok, const char *what)
{
	if (!ok) {
		perror(what);
		abort();
	}
}

static void build_work(void)
{
	char p[600];
	if (workfd >= 0)
		close(workfd);
	nftw(work, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	must(mkdir(work, 0755) == 0, "mkdir work");
	workfd = open(work, O_PATH | O_DIRECTORY | O_CLOEXEC);
	must(workfd >= 0, "open work");
	must(mkdirat(workfd, "d", 0755) == 0, "mkdir d");
	must(symlinkat("..", workfd, "up") == 0, "symlink up");
	must(symlinkat(outside, workfd, "abs") == 0, "symlink abs");
	must(symlinkat("../outside/secret", workfd, "out") == 0, "symlink out");
	must(symlinkat("/proc/self/root", workfd, "proc") == 0, "symlink proc");
	must(symlinkat(".", workfd, "self") == 0, "symlink self");
	must(symlinkat("loop", workfd, "loop") == 0, "symlink loop");
	must(symlinkat("../..", workfd, "d/back") == 0, "symlink d/back");
	must(mkfifoat(workfd, "fifo", 0644) == 0, "mkfifo");
	snprintf(p, sizeof p, "%s/linked", outside);
	/* a hard link to the secret can only exist on the same fs; it is the
	 * same inode: put must replace the name, not write through it */
	if (linkat(AT_FDCWD, p, workfd, "hard", 0) != 0 && errno != EXDEV && errno != EPERM)
		must(0, "link hard");
	int fd = openat(workfd, "d/f", O_WRONLY | O_CREAT | O_EXCL, 0644);
	must(fd >= 0 && write(fd, "f", 1) == 1, "d/f");
	close(fd);
}

static void check_file(const char *name, const char *content)
{
	char p[600], buf[256];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", outside, name);
	int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		fail("a file outside vanished or was replaced by a link");
	ssize_t n = read(fd, buf, sizeof buf);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		fail("a file outside is no longer a regular file");
	close(fd);
	if (n != (ssize_t)strlen(content) || memcmp(buf, content, (size_t)n) != 0)
		fail("a file outside changed content");
	if ((st.st_mode & 07777) != 0600)
		fail("a file outside changed mode");
}

static void check_outside(void)
{
	check_file("secret", SECRET);
	check_file("linked", LINKED);
	DIR *d = opendir(outside);
	struct dirent *e;
	int count = 0;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			count++;
	closedir(d);
	if (count != 2)
		fail("a file appeared in outside/");
	d = opendir(root);
	count = 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (strcmp(e->d_name, "work") && strcmp(e->d_name, "outside"))
			fail("a file appeared next to the work dir");
		count++;
	}
	closedir(d);
	if (count != 2)
		fail("the temp root lost an entry");
}

static void cleanup(void)
{
	if (root[0])
		nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char p[600];
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	snprintf(root, sizeof root, "%s/sbx-fuzz-files.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	must(mkdtemp(root) != NULL, "mkdtemp");
	snprintf(work, sizeof work, "%s/work", root);
	snprintf(outside, sizeof outside, "%s/outside", root);
	must(mkdir(outside, 0755) == 0, "mkdir outside");
	snprintf(p, sizeof p, "%s/secret", outside);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	must(fd >= 0 && write(fd, SECRET, strlen(SECRET)) == (ssize_t)strlen(SECRET), "secret");
	close(fd);
	snprintf(p, sizeof p, "%s/linked", outside);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	must(fd >= 0 && write(fd, LINKED, strlen(LINKED)) == (ssize_t)strlen(LINKED), "linked");
	close(fd);
	build_work();
	atexit(cleanup); /* a crash (abort) keeps the tree for a look */
	return 0;
}

static const void *want_data;
static size_t want_len;
static int found;

static int find_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	char buf[MAX_BYTES + 1];
	(void)ftw;
	if (flag != FTW_F || !S_ISREG(st->st_mode) || (size_t)st->st_size != want_len)
		return 0;
	int fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf);
	close(fd);
	if (n == (ssize_t)want_len && memcmp(buf, want_data, want_len) == 0) {
		found = 1;
		return 1;
	}
	return 0;
}

/* Whether a regular file beneath work (links not followed) holds data. */
static int landed_in_work(const void *data, size_t len)
{
	want_data = data;
	want_len = len;
	found = 0;
	nftw(work, find_cb, 16, FTW_PHYS);
	return found;
}

static void check_err(const sbx_err *err)
{
	if (err->kind == SBX_E_NONE || err->msg[0] == '\0')
		fail("a failure without an error kind or message");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const link_names[] = {"a", "b", "d/a", "d/b", "up", "d/back"};
	int planted = 0;
	size_t i = 0;

	if (++iterations % 64 == 0)
		build_work();
	while (i + 2 <= size) {
		uint8_t op = data[i];
		size_t len = data[i + 1];
		i += 2;
		if (len > size - i)
			len = size - i;
		const char *rec = (const char *)data + i;
		i += len;
		/* path: up to the first 0xff byte (so a record can carry data); may hold NULs */
		const char *sep = memchr(rec, 0xff, len);
		size_t plen = sep ? (size_t)(sep - rec) : len;
		const char *payload = sep ? sep + 1 : rec;
		size_t paylen = sep ? len - plen - 1 : 0;
		sbx_err err = {0};
		int ok_path = sbx_path_check(rec, plen, &err) == 0;
		if (!ok_path)
			check_err(&err);

		switch (op % 4) {
		case 0: {
			sbx_err perr = {0};
			if (memmem(payload, paylen, "do not touch", 12))
				break;
			int rc = sbx_file_put(workfd, rec, plen, payload, paylen, MAX_BYTES,
					      (uid_t)-1, (gid_t)-1, &perr);
			if (rc != 0)
				check_err(&perr);
			if (rc == 0 && !ok_path)
				fail("put accepted a path sbx_path_check refuses");
			if (rc == 0 && !planted) {
				char *out = NULL;
				size_t out_len = 0;
				sbx_err gerr = {0};
				/* get may fail when the path went through a link put
				 * itself replaced ("self/self" with self -> .): then
				 * the bytes must still be in a file beneath work */
				if (sbx_file_get(workfd, rec, plen, MAX_BYTES, &out, &out_len,
						 &gerr) != 0) {
					if (!landed_in_work(payload, paylen))
						fail("a successful put left its bytes nowhere beneath work");
				} else if (out_len != paylen || memcmp(out, payload, paylen) != 0) {
					fail("get returned other bytes than put wrote");
				}
				free(out);
			}
			break;
		}
		case 1: {
			char *out = NULL;
			size_t out_len = 0;
			sbx_err gerr = {0};
			int rc = sbx_file_get(workfd, rec, plen, MAX_BYTES, &out, &out_len, &gerr);
			if (rc != 0)
				check_err(&gerr);
			if (rc == 0 && !ok_path)
				fail("get accepted a path sbx_path_check refuses");
			if (rc == 0 && out_len > MAX_BYTES)
				fail("get returned more than max_bytes");
			if (rc == 0 && out_len == strlen(SECRET) &&
			    memcmp(out, SECRET, out_len) == 0)
				fail("get read the secret outside the work dir");
			free(out);
			break;
		}
		case 2: {
			/* the sandbox plants a link: single fixed names, so the
			 * harness itself never resolves a fuzzed path */
			char target[257];
			memcpy(target, rec, len);
			target[len] = '\0';
			if (strlen(target) == 0)
				break;
			const char *name = link_names[(op >> 2) % 6];
			int dfd = workfd;
			int sub = strncmp(name, "d/", 2) == 0;
			if (sub) {
				dfd = openat(workfd, "d",
					     O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (dfd < 0)
					break; /* d was replaced by a put: fine */
				name += 2;
			}
			unlinkat(dfd, name, 0);
			unlinkat(dfd, name, AT_REMOVEDIR);
			if (symlinkat(target, dfd, name) == 0)
				planted = 1;
			if (sub)
				close(dfd);
			break;
		}
		default:
			break;
		}
		check_outside();
	}
	return 0;
}
