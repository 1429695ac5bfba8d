/*
 * files.c: put_bytes / get_bytes beneath the work dir.
 *
 * Every path the caller gives is resolved with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) relative to the work dir's fd,
 * so no symlink, ".." or mount point can lead the host side outside the
 * work dir, however the sandbox rearranges the tree between two calls.
 * Names we create or rename are single components relative to an fd we
 * already resolved that way, so they are never resolved through a link.
 *
 * Hardlinks are out of scope for resolution: a hardlink is the same inode
 * under another name, not a path that leads out.  The sandbox can only
 * link files on the work dir's own mount (link(2) across mounts, binds
 * included, is EXDEV), so such a file's content was the sandbox's to read
 * anyway; protected_hardlinks limits it further.  get reads what the name
 * holds; put never writes through any link: it renames a new inode over
 * the name, so the other names of the old inode keep the old content.
 *
 * put does not fsync: the work dir is scratch space shared with a live
 * sandbox, and an fsync per put costs milliseconds.  The rename still makes
 * every reader see either the old or the whole new content.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbx.h"

#define SBX_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define SBX_FILE_MODE 0644
#define SBX_DIR_MODE 0755
#define SBX_TMP_PREFIX ".sbx-put-"
/* How much of a bad path goes into an error message. */
#define SBX_PATH_SHOWN 200

static int sbx_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode)
{
	struct open_how how = {
		.flags = flags,
		.mode = mode,
		.resolve = SBX_RESOLVE,
	};
	int fd;

	do
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	while (fd < 0 && (errno == EINTR || errno == EAGAIN));
	return fd;
}

static void sbx_close_keep_errno(int fd)
{
	int saved = errno;

	if (fd >= 0)
		close(fd);
	errno = saved;
}

/* Turn an errno from resolving `path` into the error the caller sees. */
static int sbx_resolve_error(sbx_err *err, int e, const char *what, const char *path)
{
	switch (e) {
	case ENOENT:
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, e, "no such file: %.*s",
				   SBX_PATH_SHOWN, path);
	case EXDEV:
	case ELOOP:
		return sbx_err_set(
			err, SBX_E_INVALID_ARGUMENT, e,
			"path escapes the work dir (through a symlink, '..', a mount or a link loop): %.*s",
			SBX_PATH_SHOWN, path);
	case ENOTDIR:
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, e,
				   "a parent of the path is not a directory: %.*s", SBX_PATH_SHOWN,
				   path);
	case EISDIR:
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, e, "path is a directory: %.*s",
				   SBX_PATH_SHOWN, path);
	case ENAMETOOLONG:
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, e,
				   "path is too long once symlinks are followed: %.*s",
				   SBX_PATH_SHOWN, path);
	case ENOSYS:
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, e,
				   "openat2 is not available (Linux 5.6 or newer is needed)");
	default:
		return sbx_err_set(err, SBX_E_EXECUTION, e, "%s %.*s: %s", what, SBX_PATH_SHOWN,
				   path, strerror(e));
	}
}

int sbx_path_check(const char *path, size_t len, sbx_err *err)
{
	size_t i, start;
	int shown = len < SBX_PATH_SHOWN ? (int)len : SBX_PATH_SHOWN;

	if (!path || len == 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "path is empty");
	if (memchr(path, '\0', len))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "path contains a NUL byte (after \"%.*s\")", shown, path);
	if (len >= PATH_MAX)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "path is %zu bytes long; the limit is %d", len, PATH_MAX - 1);
	if (path[0] == '/')
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "path is absolute: %.*s (give it relative to the work dir)",
				   shown, path);
	for (start = 0, i = 0; i <= len; i++) {
		size_t n;

		if (i < len && path[i] != '/')
			continue;
		n = i - start;
		if (n == 2 && path[start] == '.' && path[start + 1] == '.')
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "path contains a '..' component: %.*s", shown, path);
		if (n > NAME_MAX)
			return sbx_err_set(
				err, SBX_E_INVALID_ARGUMENT, 0,
				"path has a component of %zu bytes; the limit is %d (NAME_MAX)", n,
				NAME_MAX);
		start = i + 1;
	}
	return 0;
}

/*
 * Split a checked path (copied into buf) into its parent part and its last
 * component, refusing a path that names a directory ("a/", "a/.", ".").
 * On success *parent is "." or the parent path, *name the last component.
 */
static int sbx_path_split(char *buf, const char **parent, const char **name, sbx_err *err)
{
	size_t len = strlen(buf);
	char *slash;

	if (buf[len - 1] == '/')
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, EISDIR,
				   "path ends with '/', so it names a directory: %.*s",
				   SBX_PATH_SHOWN, buf);
	slash = strrchr(buf, '/');
	*name = slash ? slash + 1 : buf;
	if (strcmp(*name, ".") == 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, EISDIR,
				   "path names a directory: %.*s", SBX_PATH_SHOWN, buf);
	if (!slash) {
		*parent = ".";
		return 0;
	}
	/* Cut every slash before the name ("a//b" has parent "a"). */
	while (slash > buf && slash[-1] == '/')
		slash--;
	if (slash == buf) /* cannot happen: the path is relative */
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "path is absolute");
	*slash = '\0';
	*parent = buf;
	return 0;
}

/*
 * Make a directory we just created ours: mode 0755 whatever the umask, and
 * owned by uid/gid when we may chown.  fd is an O_PATH fd on it.
 */
static int sbx_dir_adopt(int fd, uid_t uid, gid_t gid)
{
	int rfd = sbx_openat2(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);

	if (rfd < 0)
		return -1;
	if (fchmod(rfd, SBX_DIR_MODE) < 0 || (geteuid() == 0 && fchown(rfd, uid, gid) < 0)) {
		sbx_close_keep_errno(rfd);
		return -1;
	}
	close(rfd);
	return 0;
}

/*
 * Open the parent dir of a put (O_PATH), creating what is missing one
 * component at a time.  Every step re-resolves its whole prefix from dirfd
 * with openat2, so a component the sandbox swaps for a symlink meanwhile is
 * still confined beneath the work dir.
 */
static int sbx_open_parent(int dirfd, char *parent, uid_t uid, gid_t gid, sbx_err *err)
{
	const uint64_t dflags = O_PATH | O_DIRECTORY | O_CLOEXEC;
	char *p = parent;
	int fd, prev = -1;

	fd = sbx_openat2(dirfd, parent, dflags, 0);
	if (fd >= 0 || errno != ENOENT)
		goto done;

	for (;;) {
		char *end = p, saved, *comp = p;

		while (*end && *end != '/')
			end++;
		saved = *end;
		*end = '\0';
		fd = sbx_openat2(dirfd, parent, dflags, 0);
		if (fd < 0 && errno == ENOENT && *comp && strcmp(comp, ".") != 0) {
			/* The component itself is a single name: no resolution. */
			int made = mkdirat(prev >= 0 ? prev : dirfd, comp, SBX_DIR_MODE);

			if (made < 0 && errno != EEXIST) {
				*end = saved;
				break;
			}
			fd = sbx_openat2(dirfd, parent, dflags, 0);
			if (fd >= 0 && made == 0 && sbx_dir_adopt(fd, uid, gid) < 0) {
				sbx_close_keep_errno(fd);
				fd = -1;
			}
		}
		*end = saved;
		if (fd < 0)
			break;
		sbx_close_keep_errno(prev);
		prev = fd;
		if (!saved)
			break;
		p = end + 1;
	}
	if (fd < 0) {
		sbx_close_keep_errno(prev);
		prev = -1;
	}
	fd = prev;
done:
	if (fd < 0)
		return sbx_resolve_error(err, errno, "cannot open the parent dir", parent);
	return fd;
}

static void sbx_tmp_name(char *name, size_t size)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char rnd[6];
	size_t pre = sizeof(SBX_TMP_PREFIX) - 1, i;

	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
		/* Only uniqueness matters here (O_EXCL guards the rest). */
		uint64_t x = (uint64_t)getpid() * 2654435761u ^ (uint64_t)(uintptr_t)name;

		for (i = 0; i < sizeof(rnd); i++)
			rnd[i] = (unsigned char)(x >> (i * 8));
	}
	memcpy(name, SBX_TMP_PREFIX, pre);
	for (i = 0; i < sizeof(rnd) && pre + i + 1 < size; i++)
		name[pre + i] = alphabet[rnd[i] % (sizeof(alphabet) - 1)];
	name[pre + i] = '\0';
}

static int sbx_write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

int sbx_file_put(int dirfd, const char *path, size_t path_len, const void *data, size_t len,
		 size_t max_bytes, uid_t uid, gid_t gid, sbx_err *err)
{
	char buf[PATH_MAX], tmp[sizeof(SBX_TMP_PREFIX) + 8];
	const char *parent = NULL, *name = NULL;
	int pfd, fd = -1, tries, e;

	if (sbx_path_check(path, path_len, err) < 0)
		return -1;
	if (len > max_bytes)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, EFBIG,
				   "data is %zu bytes, over the cap of %zu bytes", len, max_bytes);
	if (len > 0 && !data)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "data is NULL");
	memcpy(buf, path, path_len);
	buf[path_len] = '\0';
	if (sbx_path_split(buf, &parent, &name, err) < 0)
		return -1;
	pfd = sbx_open_parent(dirfd, (char *)parent, uid, gid, err);
	if (pfd < 0)
		return -1;

	for (tries = 0; tries < 32; tries++) {
		sbx_tmp_name(tmp, sizeof(tmp));
		fd = sbx_openat2(pfd, tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, SBX_FILE_MODE);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0) {
		e = errno;
		close(pfd);
		return sbx_resolve_error(err, e, "cannot create a temp file beside", path);
	}
	if (sbx_write_all(fd, data, len) < 0) {
		e = errno;
		sbx_err_set(err, SBX_E_EXECUTION, e, "cannot write %.*s: %s", SBX_PATH_SHOWN, path,
			    strerror(e));
		goto fail;
	}
	/* Mode and owner on the fd, so neither can land on another file. */
	if (fchmod(fd, SBX_FILE_MODE) < 0 || (geteuid() == 0 && fchown(fd, uid, gid) < 0)) {
		e = errno;
		sbx_err_set(err, SBX_E_EXECUTION, e, "cannot set the owner of %.*s: %s",
			    SBX_PATH_SHOWN, path, strerror(e));
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		e = errno;
		sbx_err_set(err, SBX_E_EXECUTION, e, "cannot write %.*s: %s", SBX_PATH_SHOWN, path,
			    strerror(e));
		goto fail;
	}
	fd = -1;
	/* rename replaces a symlink at name; it never writes through one. */
	if (renameat(pfd, tmp, pfd, name) < 0) {
		e = errno;
		if (e == EISDIR || e == ENOTEMPTY || e == EEXIST)
			sbx_err_set(err, SBX_E_INVALID_ARGUMENT, e, "path is a directory: %.*s",
				    SBX_PATH_SHOWN, path);
		else
			sbx_resolve_error(err, e, "cannot rename the temp file onto", path);
		goto fail;
	}
	close(pfd);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlinkat(pfd, tmp, 0);
	close(pfd);
	return -1;
}

static const char *sbx_type_name(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return "a directory";
	case S_IFIFO:
		return "a FIFO";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFSOCK:
		return "a socket";
	case S_IFLNK:
		return "a symlink";
	default:
		return "not a regular file";
	}
}

/*
 * Open path for reading, refusing anything but a regular file.  The type is
 * checked on an O_PATH fd first so a device is never opened (opening one
 * can have side effects); the second open is O_NONBLOCK so a FIFO swapped
 * in between cannot block us, and its inode must match the first.
 */
static int sbx_open_regular(int dirfd, const char *path, struct stat *st, sbx_err *err)
{
	struct stat st2;
	int pfd, fd;

	pfd = sbx_openat2(dirfd, path, O_PATH | O_CLOEXEC, 0);
	if (pfd < 0)
		return sbx_resolve_error(err, errno, "cannot open", path);
	if (fstat(pfd, st) < 0) {
		int e = errno;

		close(pfd);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "cannot stat %.*s: %s", SBX_PATH_SHOWN,
				   path, strerror(e));
	}
	close(pfd);
	if (!S_ISREG(st->st_mode))
		goto not_regular;

	fd = sbx_openat2(dirfd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0);
	if (fd < 0)
		return sbx_resolve_error(err, errno, "cannot open", path);
	if (fstat(fd, &st2) < 0) {
		int e = errno;

		close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "cannot stat %.*s: %s", SBX_PATH_SHOWN,
				   path, strerror(e));
	}
	if (st2.st_dev != st->st_dev || st2.st_ino != st->st_ino) {
		close(fd);
		*st = st2;
		if (!S_ISREG(st->st_mode))
			goto not_regular;
		return sbx_err_set(err, SBX_E_EXECUTION, EAGAIN,
				   "%.*s changed while it was opened; try again", SBX_PATH_SHOWN,
				   path);
	}
	*st = st2;
	return fd;
not_regular:
	return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
			   "%.*s is %s; only regular files can be read", SBX_PATH_SHOWN, path,
			   sbx_type_name(st->st_mode));
}

int sbx_file_open(int dirfd, const char *path, size_t path_len, size_t max_bytes, uint64_t *size,
		  sbx_err *err)
{
	char pbuf[PATH_MAX];
	struct stat st;

	if (sbx_path_check(path, path_len, err) < 0)
		return -1;
	memcpy(pbuf, path, path_len);
	pbuf[path_len] = '\0';
	int fd = sbx_open_regular(dirfd, pbuf, &st, err);
	if (fd < 0)
		return -1;
	if ((uint64_t)st.st_size > max_bytes) {
		close(fd);
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, EFBIG,
				   "%.*s is %jd bytes, over the cap of %zu bytes", SBX_PATH_SHOWN,
				   pbuf, (intmax_t)st.st_size, max_bytes);
	}
	*size = (uint64_t)st.st_size;
	return fd;
}

/* Ask for transparent huge pages under a large buffer not yet touched:
 * reading a 200 MB file into fresh 4 KiB pages spent about as long in
 * page faults and zeroing as in the copy (get_bytes 0.44-0.53x of cp;
 * 130 -> 75 ms for the read here).  Where THP is "madvise" this is what
 * turns it on; elsewhere it changes nothing. */
static void advise_huge(void *p, size_t len)
{
	const uintptr_t huge = 2u << 20;
	uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1);
	uintptr_t end = ((uintptr_t)p + len) & ~(huge - 1);

	if (end > start)
		(void)madvise((void *)start, end - start, MADV_HUGEPAGE);
}

int sbx_file_get(int dirfd, const char *path, size_t path_len, size_t max_bytes, char **out,
		 size_t *out_len, sbx_err *err)
{
	char pbuf[PATH_MAX]; /* the path, NUL-ended, for messages */
	uint64_t size;
	size_t cap, limit, used = 0;
	char *data;
	int fd;

	if (!out || !out_len)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "out and out_len are required");
	*out = NULL;
	*out_len = 0;
	fd = sbx_file_open(dirfd, path, path_len, max_bytes, &size, err);
	if (fd < 0)
		return -1;
	/* sbx_file_open checked the path: it fits. */
	memcpy(pbuf, path, path_len);
	pbuf[path_len] = '\0';

	/* One byte more than the size: room for a NUL, and a file still growing
	 * fills the buffer, which is how we notice it. */
	limit = max_bytes < SIZE_MAX ? max_bytes + 1 : SIZE_MAX;
	cap = (size_t)size + 1;
	data = malloc(cap);
	if (!data) {
		close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory reading %.*s",
				   SBX_PATH_SHOWN, pbuf);
	}
	advise_huge(data, cap);
	for (;;) {
		ssize_t n;

		if (used == cap) {
			size_t ncap = cap > limit / 2 ? limit : cap * 2;
			char *nd;

			if (cap >= limit) {
				free(data);
				close(fd);
				return sbx_err_set(
					err, SBX_E_INVALID_ARGUMENT, EFBIG,
					"%.*s grew over the cap of %zu bytes while it was read",
					SBX_PATH_SHOWN, pbuf, max_bytes);
			}
			nd = realloc(data, ncap);
			if (!nd) {
				free(data);
				close(fd);
				return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM,
						   "out of memory reading %.*s", SBX_PATH_SHOWN,
						   pbuf);
			}
			data = nd;
			cap = ncap;
		}
		n = read(fd, data + used, cap - used);
		if (n < 0) {
			int e = errno;

			if (e == EINTR)
				continue;
			free(data);
			close(fd);
			return sbx_err_set(err, SBX_E_EXECUTION, e, "cannot read %.*s: %s",
					   SBX_PATH_SHOWN, pbuf, strerror(e));
		}
		if (n == 0)
			break;
		used += (size_t)n;
	}
	close(fd);
	/* used < cap <= limit here, so used <= max_bytes and data[used] exists. */
	data[used] = '\0';
	*out = data;
	*out_len = used;
	return 0;
}
