/*
 * statedir.c: a session's place on the host: its id, its dir below the
 * state dir (sessions/<id>, holding the work dir and a lock file the
 * session keeps flock'd), or the caller's pinned work dir; and the sweep
 * of what sessions whose process died left there (at a process's first
 * open, then at most once a minute: it opens every live session's lock).
 * A closed session's dir waits in <state>/gone/<id> for the reaper thread
 * (session.c's asynchronous close); the sweep looks there too.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "session_impl.h"

/*
 * Remove a session's dir and everything below it by fd, never by path.
 * Its work dir is the sandbox's, and a closed session's processes die a
 * moment after the close returns (the dead-session sweep of another
 * process may come in between): a directory swapped for a symlink
 * mid-walk must not send this walk, which runs as root, elsewhere
 * (nftw reopened each directory by its path).  Each directory is opened
 * O_NOFOLLOW from its parent's fd and must be on the same file system (a
 * mount point is left, as FTW_MOUNT did); what is deeper than
 * RM_MAX_DEPTH stays for the next sweep.  0, or -1 when anything stayed.
 */
#define RM_MAX_DEPTH 128
static int rm_below(int dfd, dev_t dev, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int rc = 0;

	if (!d) {
		close(dfd);
		return -1;
	}
	while ((de = readdir(d))) {
		struct stat st;
		const char *name = de->d_name;

		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = errno == ENOENT ? rc : -1;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (unlinkat(dirfd(d), name, 0) != 0 && errno != ENOENT)
				rc = -1;
			continue;
		}
		int sub = st.st_dev == dev && depth < RM_MAX_DEPTH
				  ? openat(dirfd(d), name,
					   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
				  : -1;
		struct stat opened;
		if (sub < 0 || fstat(sub, &opened) != 0 || opened.st_dev != dev) {
			if (sub >= 0)
				close(sub);
			rc = -1;
			continue;
		}
		if (rm_below(sub, dev, depth + 1) != 0 ||
		    (unlinkat(dirfd(d), name, AT_REMOVEDIR) != 0 && errno != ENOENT))
			rc = -1;
	}
	closedir(d);
	return rc;
}

static int rm_tree(const char *dir)
{
	struct stat st;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return -1;
	}
	int rc = rm_below(fd, st.st_dev, 0);
	return rmdir(dir) == 0 || errno == ENOENT ? rc : -1;
}

static int mkdir_owned(const char *path, mode_t mode, sbx_err *err)
{
	if (mkdir(path, mode) != 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "mkdir %s: %s", path,
				   strerror(errno));
	return 0;
}

static const char *default_state_dir(char *buf, size_t len)
{
	const char *env = getenv("SBX_STATE_DIR");
	if (env && *env)
		return env;
	if (geteuid() == 0)
		return "/var/lib/sbx";
	env = getenv("XDG_RUNTIME_DIR");
	if (env && *env)
		snprintf(buf, len, "%s/sbx", env);
	else
		snprintf(buf, len, "/tmp/sbx-%u", (unsigned)geteuid());
	return buf;
}

/*
 * A session dir holds a "lock" file its session keeps flock'd.  A lock we
 * can take belongs to a session whose process died (kill -9, crash): its
 * processes died with it (the zygote has PDEATHSIG), so remove what it left.
 */
#define SWEEP_EVERY_S 60

static void sweep_stale(const char *sessions)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d = opendir(sessions);

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || strlen(de->d_name) != 32)
			continue;
		snprintf(path, sizeof(path), "%.4000s/%.40s/lock", sessions, de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		struct stat st;
		/* No lock yet: a session being created right now, unless old. */
		if (fd < 0 && (errno != ENOENT || fstatat(dirfd(d), de->d_name, &st, 0) != 0 ||
			       time(NULL) - st.st_mtime < 60))
			continue;
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
			close(fd);
			continue;
		}
		snprintf(path, sizeof(path), "%.4000s/%.40s", sessions, de->d_name);
		rm_tree(path);
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
}

int sbx_statedir_prepare(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	char buf[PATH_MAX], sessions[PATH_MAX];
	unsigned char rnd[16];

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "getrandom: %s", strerror(errno));
	for (int i = 0; i < 16; i++)
		snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);

	if (o->work_dir) {
		struct stat st;
		if (o->work_dir[0] != '/' || !realpath(o->work_dir, s->work_dir))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, errno,
					   "work_dir %s: must be an existing absolute directory",
					   o->work_dir);
		if (stat(s->work_dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
		    !strcmp(s->work_dir, "/"))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENOTDIR,
					   "work_dir %s: not a directory", o->work_dir);
		s->pinned = true;
		/* Never chowned: the sandbox gets it through an idmap
		 * (idmap.c) that keeps this owner. */
		s->work_uid = st.st_uid;
		s->work_gid = st.st_gid;
	} else {
		const char *state =
			o->state_dir ? o->state_dir : default_state_dir(buf, sizeof(buf));
		if (state[0] != '/')
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "state_dir %s: must be absolute", state);
		if (snprintf(sessions, sizeof(sessions), "%s/sessions", state) >= 4000)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG,
					   "state_dir %s: path too long", state);
		/* 0711: the sandbox's host uid must traverse to its work dir,
		 * nobody may list the other sessions. */
		if (mkdir_owned(state, 0711, err) < 0 || mkdir_owned(sessions, 0711, err) < 0)
			return -1;
		if (snprintf(s->session_dir, sizeof(s->session_dir), "%.4000s/%s", sessions,
			     s->id) >= (int)sizeof(s->session_dir) - 8 ||
		    snprintf(s->work_dir, sizeof(s->work_dir), "%.4000s/work", s->session_dir) >=
			    (int)sizeof(s->work_dir))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG,
					   "state_dir %s: path too long", state);
		/* The sweep opens every session's lock: at 2,000 live
		 * sessions that is most of an open's time.  So a process
		 * sweeps at its first open, then at most once a minute (a
		 * dead session's dir waits that long at most). */
		static int64_t last_sweep = INT64_MIN;
		int64_t now = (int64_t)time(NULL),
			last = __atomic_load_n(&last_sweep, __ATOMIC_RELAXED);
		if ((last == INT64_MIN || now - last >= SWEEP_EVERY_S || now < last) &&
		    __atomic_compare_exchange_n(&last_sweep, &last, now, false, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED)) {
			char gone[PATH_MAX];
			snprintf(gone, sizeof(gone), "%.4000s/gone", state);
			sweep_stale(sessions);
			sweep_stale(gone);
		}
		if (mkdir(s->session_dir, 0711) != 0)
			return sbx_err_set(err, SBX_E_EXECUTION, errno, "create %s: %s",
					   s->session_dir, strerror(errno));
		/* The lock is made under another name and renamed once held:
		 * another process's sweep, finding "lock" unheld in between,
		 * would take it for a dead session's and remove the dir (seen
		 * with many sessions opening at once). */
		char lock[PATH_MAX], fresh[PATH_MAX];
		snprintf(lock, sizeof(lock), "%.4000s/lock", s->session_dir);
		snprintf(fresh, sizeof(fresh), "%.4000s/lock.new", s->session_dir);
		s->lock_fd = open(fresh, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0 ||
		    rename(fresh, lock) != 0 || mkdir(s->work_dir, 0700) != 0)
			return sbx_err_set(err, SBX_E_EXECUTION, errno, "create work dir %s: %s",
					   s->work_dir, strerror(errno));
	}
	if (!s->pinned && geteuid() == 0 && chown(s->work_dir, s->host_uid, s->host_gid) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "chown %s to %u: %s", s->work_dir,
				   (unsigned)s->host_uid, strerror(errno));
	s->work_fd = open(s->work_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s->work_fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "open %s: %s", s->work_dir,
				   strerror(errno));
	return 0;
}

int sbx_statedir_stage(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	char buf[PATH_MAX];
	struct stat st;
	const char *state = o->state_dir ? o->state_dir : default_state_dir(buf, sizeof(buf));

	if (state[0] != '/' || snprintf(s->work_stage, sizeof(s->work_stage), "%s/bwrap-work",
					state) >= (int)sizeof(s->work_stage))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG,
				   "state_dir %s: must be absolute and short", state);
	/* Empty on the host for good: each run's copy is attached over it in
	 * that run's own mount namespace (idmap.c). */
	if (mkdir_owned(state, 0711, err) < 0 || mkdir_owned(s->work_stage, 0755, err) < 0)
		return -1;
	if (lstat(s->work_stage, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOTDIR, "%s: not a directory of root's",
				   s->work_stage);
	return 0;
}

int sbx_statedir_retire(sbx_session *s)
{
	char gone[PATH_MAX], to[PATH_MAX];
	size_t n = strlen(s->session_dir), tail = strlen("/sessions/") + 32;

	/* session_dir is <state>/sessions/<id>. */
	if (n <= tail || n - tail >= 4000 ||
	    strncmp(s->session_dir + n - tail, "/sessions/", strlen("/sessions/")))
		return -1;
	snprintf(gone, sizeof(gone), "%.*s/gone", (int)(n - tail), s->session_dir);
	snprintf(to, sizeof(to), "%.4010s/%.32s", gone, s->id);
	if ((mkdir(gone, 0711) != 0 && errno != EEXIST) || rename(s->session_dir, to) != 0)
		return -1;
	snprintf(s->session_dir, sizeof(s->session_dir), "%s", to);
	return 0;
}

int sbx_statedir_remove(const char *dir)
{
	char path[PATH_MAX];
	/* Mostly what the session made and nothing more (its lock, an empty
	 * work dir): three calls, not a walk (nftw's opens and stats were a
	 * tenth of a close).  Anything else: the walk. */
	snprintf(path, sizeof(path), "%.4000s/work", dir);
	if (rmdir(path) == 0 || errno == ENOENT) {
		snprintf(path, sizeof(path), "%.4000s/lock", dir);
		if ((unlink(path) == 0 || errno == ENOENT) && rmdir(dir) == 0)
			return 0;
	}
	return rm_tree(dir);
}
