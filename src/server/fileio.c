/*
 * fileio.c: the writes of file uploads, off the event loop.
 *
 * A PUT body (up to --max-body, 8 MiB by default) written in one go took
 * sbxd's loop 3-110 ms here (page cache, dirty-page throttling): long
 * enough to stall every other client.  Each write now runs on a thread of
 * its own: the loop copies the body, starts the job and waits on the job's
 * eventfd like on any other fd (task.c), then reads the result.
 *
 * The body of a PUT .../files/ reaches Lua as a body object, not a string
 * (handler.c): one copy of h2o's buffer into the C heap, which the job
 * takes over.  A Lua string of a multi-MiB body cost a copy into memory
 * LuaJIT maps afresh (and faults in) per string, then a second copy into
 * the job: together a third of sbxd's CPU per upload.
 *
 *   sbx_srv_file_body_push(L, bytes, len)  (C) push a body object
 *   #body          its length in bytes
 *   body:free()    let its bytes go now (a body refused before a write)
 *
 *   file_io.put(cs, rel_path, data, max_bytes) -> job
 *       sbx_file_put beneath the session's work dir (the same temp file +
 *       rename as s:put_bytes; cs is the core session userdata, whose work
 *       dir fd is duplicated, so closing the session meanwhile is safe)
 *   file_io.append(fd, offset, data) -> job
 *       sbx_srv_file_append (fileput.c) on fd (taken)
 *   job:fd()      an eventfd, readable once the job is done (the job's)
 *   job:result()  put: true | nil, kind, msg; append: as fileput.c's
 *                 append; raises when called before the job is done
 *
 * A job is shared by its thread and its userdata: whichever lets go last
 * frees it, so a client that leaves mid-write leaks nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <lauxlib.h>

#include "../lua/lsbx.h"
#include "server.h"

#define JOB_MT "sbxd.file_job"
#define BODY_MT "sbxd.file_body"

enum { JOB_PUT = 1, JOB_APPEND };

typedef struct fio_job {
	int refs; /* the thread's and the userdata's */
	int done;
	int efd;
	int kind;
	int dirfd, fd;
	uid_t uid;
	gid_t gid;
	char *path, *data;
	size_t path_len, len, max;
	uint64_t offset;
	int rc;
	uint64_t size;
	sbx_err err;
} fio_job;

static void job_release(fio_job *j)
{
	if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (j->efd >= 0)
		close(j->efd);
	if (j->dirfd >= 0)
		close(j->dirfd);
	if (j->fd >= 0)
		close(j->fd);
	free(j->path);
	free(j->data);
	free(j);
}

static void job_run(fio_job *j)
{
	if (j->kind == JOB_PUT) {
		j->rc = sbx_file_put(j->dirfd, j->path, j->path_len, j->data, j->len, j->max,
				     j->uid, j->gid, &j->err);
	} else {
		j->rc = sbx_srv_file_append(j->fd, j->offset, j->data, j->len, &j->size, &j->err);
		j->fd = -1; /* taken (closed) by the append */
	}
	free(j->data);
	j->data = NULL;
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	uint64_t one = 1;
	(void)!write(j->efd, &one, sizeof(one));
}

static void *job_thread(void *arg)
{
	job_run(arg);
	job_release(arg);
	return NULL;
}

/* ---- request bodies ---- */

typedef struct fio_body {
	char *data; /* NULL once a job took it, or freed */
	size_t len;
} fio_body;

int sbx_srv_file_body_push(lua_State *L, const char *bytes, size_t len)
{
	char *data = malloc(len ? len : 1);
	fio_body *b;

	if (!data)
		return -1;
	memcpy(data, bytes, len);
	b = lua_newuserdata(L, sizeof(*b));
	b->data = data;
	b->len = len;
	luaL_getmetatable(L, BODY_MT);
	lua_setmetatable(L, -2);
	return 0;
}

static int l_body_len(lua_State *L)
{
	lua_pushnumber(L, (lua_Number)((fio_body *)luaL_checkudata(L, 1, BODY_MT))->len);
	return 1;
}

static int l_body_free(lua_State *L)
{
	fio_body *b = luaL_checkudata(L, 1, BODY_MT);
	free(b->data);
	b->data = NULL;
	return 0;
}

/* The bytes at idx for a job, in a buffer of the job's own: a body
 * object's are taken over (no copy), a string's copied.  NULL when out
 * of memory; raises for a body already used or another type. */
static char *job_data(lua_State *L, int idx, size_t *len)
{
	fio_body *b = lua_type(L, idx) == LUA_TUSERDATA ? luaL_testudata(L, idx, BODY_MT) : NULL;
	const char *s;
	char *d;

	if (b) {
		if (!b->data)
			luaL_argerror(L, idx, "the body was already written or freed");
		d = b->data;
		*len = b->len;
		b->data = NULL;
		return d;
	}
	s = luaL_checklstring(L, idx, len);
	d = malloc(*len ? *len : 1);
	if (d)
		memcpy(d, s, *len);
	return d;
}

/* Whether job_data would take the value at idx without raising. */
static bool job_data_ok(lua_State *L, int idx)
{
	fio_body *b = lua_type(L, idx) == LUA_TUSERDATA ? luaL_testudata(L, idx, BODY_MT) : NULL;
	return b ? b->data != NULL : lua_type(L, idx) == LUA_TSTRING;
}

/* ---- jobs ---- */

/* The job's userdata (pushed) over a job with the bytes at data_idx (a
 * body object or a string, see job_data); NULL after pushing nothing
 * when out of memory. */
static fio_job *job_new(lua_State *L, int kind, int data_idx)
{
	size_t len;
	char *data = job_data(L, data_idx, &len);
	fio_job *j = data ? calloc(1, sizeof(*j)) : NULL;
	fio_job **ud;

	if (!j) {
		free(data);
		return NULL;
	}
	j->kind = kind;
	j->refs = 1;
	j->dirfd = j->fd = -1;
	j->data = data;
	j->len = len;
	j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (j->efd < 0) {
		job_release(j);
		return NULL;
	}
	ud = lua_newuserdata(L, sizeof(*ud));
	*ud = j;
	luaL_getmetatable(L, JOB_MT);
	lua_setmetatable(L, -2);
	return j;
}

/* Run the job on a thread of its own (inline when no thread can start). */
static void job_start(fio_job *j)
{
	pthread_attr_t a;
	pthread_t t;

	__atomic_add_fetch(&j->refs, 1, __ATOMIC_ACQ_REL);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, job_thread, j) != 0)
		job_thread(j);
	pthread_attr_destroy(&a);
}

/* file_io.put(cs, rel_path, data, max_bytes) -> job | nil, kind, msg */
static int l_put(lua_State *L)
{
	lsbx_session *s = lsbx_check_session(L, 1);
	size_t path_len;
	const char *path = luaL_checklstring(L, 2, &path_len);
	lua_Number max = luaL_checknumber(L, 4);

	if (!s->s)
		return lsbx_push_fail(L, SBX_E_SESSION_CLOSED, "the session is closed");
	fio_job *j = job_new(L, JOB_PUT, 3);
	if (!j)
		return lsbx_push_fail(L, SBX_E_EXECUTION, "out of memory");
	j->path = malloc(path_len + 1);
	j->dirfd = fcntl(sbx_session_work_dir_fd(s->s), F_DUPFD_CLOEXEC, 3);
	if (!j->path || j->dirfd < 0)
		return lsbx_push_fail(L, SBX_E_EXECUTION, "cannot start the write");
	memcpy(j->path, path, path_len + 1);
	j->path_len = path_len;
	j->max = max < 0 ? 0 : (size_t)max;
	j->uid = sbx_session_host_uid(s->s);
	j->gid = sbx_session_host_gid(s->s);
	job_start(j);
	return 1;
}

/* file_io.append(fd, offset, data) -> job | nil, kind, msg (fd taken) */
static int l_append(lua_State *L)
{
	int fd = (int)luaL_checkinteger(L, 1);
	lua_Number off = lua_tonumber(L, 2);

	/* fd is ours from here on: close it on every refusal. */
	if (!job_data_ok(L, 3)) {
		close(fd);
		return luaL_argerror(L, 3, "a string or an unused body expected");
	}
	if (off < 1 || off > 9007199254740992.0 || off != (lua_Number)(uint64_t)off) {
		close(fd);
		return luaL_argerror(L, 2, "a positive integer expected");
	}
	fio_job *j = job_new(L, JOB_APPEND, 3);
	if (!j) {
		close(fd);
		return lsbx_push_fail(L, SBX_E_EXECUTION, "out of memory");
	}
	j->fd = fd;
	j->offset = off < 0 ? 0 : (uint64_t)off;
	job_start(j);
	return 1;
}

static fio_job *check_job(lua_State *L)
{
	return *(fio_job **)luaL_checkudata(L, 1, JOB_MT);
}

static int l_job_fd(lua_State *L)
{
	lua_pushinteger(L, check_job(L)->efd);
	return 1;
}

static int l_job_result(lua_State *L)
{
	fio_job *j = check_job(L);

	if (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE))
		return luaL_error(L, "job:result() before the job is done (wait for job:fd())");
	if (j->kind == JOB_PUT) {
		if (j->rc < 0)
			return lsbx_push_err(L, &j->err);
		lua_pushboolean(L, 1);
		return 1;
	}
	/* As sbx_srv_l_file_append (fileput.c). */
	if (j->rc == 0) {
		lua_pushboolean(L, 1);
		lua_pushnumber(L, (lua_Number)j->size);
		return 2;
	}
	lua_pushnil(L);
	if (j->rc == 1) {
		lua_pushliteral(L, "Conflict");
		lua_pushstring(L, j->err.msg);
		lua_pushnumber(L, (lua_Number)j->size);
		return 4;
	}
	lua_pushstring(L, sbx_err_kind_name(j->err.kind));
	lua_pushstring(L, j->err.msg);
	return 3;
}

static int l_job_gc(lua_State *L)
{
	fio_job **ud = luaL_checkudata(L, 1, JOB_MT);
	if (*ud) {
		job_release(*ud);
		*ud = NULL;
	}
	return 0;
}

void sbx_srv_file_io_push(lua_State *L)
{
	static const luaL_Reg job_methods[] = {
		{"fd", l_job_fd},
		{"result", l_job_result},
		{NULL, NULL},
	};
	if (luaL_newmetatable(L, JOB_MT)) {
		lua_newtable(L);
		luaL_register(L, NULL, job_methods);
		lua_setfield(L, -2, "__index");
		lua_pushcfunction(L, l_job_gc);
		lua_setfield(L, -2, "__gc");
		lua_pushliteral(L, JOB_MT);
		lua_setfield(L, -2, "__metatable");
	}
	lua_pop(L, 1);
	if (luaL_newmetatable(L, BODY_MT)) {
		lua_pushcfunction(L, l_body_free);
		lua_setfield(L, -2, "__gc");
		lua_pushcfunction(L, l_body_len);
		lua_setfield(L, -2, "__len");
		lua_newtable(L);
		lua_pushcfunction(L, l_body_free);
		lua_setfield(L, -2, "free");
		lua_setfield(L, -2, "__index");
		lua_pushliteral(L, BODY_MT);
		lua_setfield(L, -2, "__metatable");
	}
	lua_pop(L, 1);
	lua_createtable(L, 0, 2);
	lua_pushcfunction(L, l_put);
	lua_setfield(L, -2, "put");
	lua_pushcfunction(L, l_append);
	lua_setfield(L, -2, "append");
}
