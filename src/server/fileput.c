/*
 * fileput.c: the append step of a chunked upload,
 * PUT /v1/sessions/{id}/files/{path}?offset=N with N > 0.
 *
 * h2o 2.2 reads a whole request body before the handler runs, so sbxd
 * cannot stream one large body to disk; a client sends a large file as
 * consecutive PUTs instead, each bounded by --max-body: the first
 * (offset 0) goes through put_bytes (temp file + rename, as always), each
 * next one is appended here.  Memory per upload is one chunk, whatever
 * the file's size.
 *
 * The Lua layer (lua/sbx/server/init.lua) resolves the path exactly as
 * GET does, through the core's safe open (sbx_file_open: openat2 beneath
 * the work dir, regular files only), and hands us that read-only fd.  We
 * never resolve a path ourselves: the fd is reopened for writing through
 * /proc/self/fd, which names that very inode (checked by dev/ino after the
 * open), so nothing the sandbox does to the tree meanwhile can redirect
 * the write.  The append happens only when the file's size is exactly the
 * offset the client names: a chunk sent twice, or after a gap, is refused
 * (409) with the current size, so an interrupted upload resumes where the
 * file really ends and no byte is ever written twice.  A file with other
 * hard links is refused too: an append writes in place, and must not
 * reach content under another name (a whole put replaces the inode).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>

#include "server.h"

/* Reopen fd (a regular file) for writing, as the same inode. */
static int reopen_write(int fd, const struct stat *st, sbx_err *err)
{
	char proc[64];
	struct stat st2;
	int wfd;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	do
		wfd = open(proc, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	while (wfd < 0 && errno == EINTR);
	if (wfd < 0) {
		int e = errno;
		if (e == EACCES || e == EPERM)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, e,
					   "the file is not writable by the server");
		return sbx_err_set(err, SBX_E_EXECUTION, e, "cannot reopen the file to append: %s",
				   strerror(e));
	}
	if (fstat(wfd, &st2) < 0 || st2.st_dev != st->st_dev || st2.st_ino != st->st_ino ||
	    !S_ISREG(st2.st_mode)) {
		close(wfd);
		return sbx_err_set(err, SBX_E_EXECUTION, EAGAIN,
				   "the file changed while it was opened; try again");
	}
	return wfd;
}

int sbx_srv_file_append(int fd, uint64_t offset, const char *data, size_t len, uint64_t *size,
			sbx_err *err)
{
	struct stat st;
	int wfd, rc = -1;

	*size = 0;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		sbx_err_set(err, SBX_E_EXECUTION, e, "cannot stat the file: %s", strerror(e));
		goto out;
	}
	*size = (uint64_t)st.st_size;
	if (!S_ISREG(st.st_mode)) {
		sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
			    "only regular files can be appended to");
		goto out;
	}
	if (st.st_nlink != 1) {
		sbx_err_set(err, SBX_E_INVALID_ARGUMENT, EMLINK,
			    "the file has %ju names (hard links); put it whole (offset 0) instead",
			    (uintmax_t)st.st_nlink);
		rc = 1;
		goto out;
	}
	if ((uint64_t)st.st_size != offset) {
		sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
			    "the file is %" PRIu64 " bytes, not %" PRIu64
			    "; resume at offset=%" PRIu64,
			    (uint64_t)st.st_size, offset, (uint64_t)st.st_size);
		rc = 1;
		goto out;
	}
	wfd = reopen_write(fd, &st, err);
	if (wfd < 0)
		goto out;
	while (len > 0) {
		ssize_t n = pwrite(wfd, data, len, (off_t)offset);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			sbx_err_set(err, e == EFBIG ? SBX_E_INVALID_ARGUMENT : SBX_E_EXECUTION, e,
				    "cannot write at offset %" PRIu64 ": %s", offset, strerror(e));
			close(wfd);
			goto out;
		}
		data += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	if (close(wfd) < 0) {
		int e = errno;
		sbx_err_set(err, SBX_E_EXECUTION, e, "cannot write: %s", strerror(e));
		goto out;
	}
	*size = offset;
	rc = 0;
out:
	close(fd);
	return rc;
}

/*
 * Lua: append(fd, offset, data) -- fd from Session:_open_file, always
 * closed here.
 *   -> true, new_size
 *   |  nil, "Conflict", message, current_size  (size is not offset, or links)
 *   |  nil, kind, message                      (any other failure)
 */
int sbx_srv_l_file_append(lua_State *L)
{
	int fd = (int)luaL_checkinteger(L, 1);
	lua_Number off = lua_tonumber(L, 2); /* checked below, once fd is ours */
	size_t len;
	const char *data = lua_type(L, 3) == LUA_TSTRING ? lua_tolstring(L, 3, &len) : NULL;
	sbx_err err = {0};
	uint64_t size;
	int rc;

	if (!data) {
		close(fd);
		return luaL_argerror(L, 3, "string expected");
	}
	if (off < 1 || off > 9007199254740992.0 || off != (lua_Number)(uint64_t)off) {
		close(fd);
		return luaL_argerror(L, 2, "a positive integer expected");
	}
	rc = sbx_srv_file_append(fd, (uint64_t)off, data, len, &size, &err);
	if (rc == 0) {
		lua_pushboolean(L, 1);
		lua_pushnumber(L, (lua_Number)size);
		return 2;
	}
	lua_pushnil(L);
	lua_pushstring(L, rc > 0 ? "Conflict" : sbx_err_kind_name(err.kind));
	lua_pushstring(L, err.msg);
	if (rc > 0) {
		lua_pushnumber(L, (lua_Number)size);
		return 4;
	}
	return 3;
}
