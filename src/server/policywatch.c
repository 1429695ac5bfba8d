/*
 * policywatch.c: sbxd --watch-policy: reload the policy when its file is
 * replaced, without a signal.
 *
 * Kubernetes mounts a ConfigMap as a directory whose files are symlinks
 * through "..data", itself a symlink to a timestamped dir; an update writes
 * a new dir and renames a new "..data" over the old one.  A watch on the
 * file would follow the old inode and never fire, so we watch the file's
 * directory and reload when the file's name or "..data" is renamed into
 * it (IN_MOVED_TO) or the file is written and closed (IN_CLOSE_WRITE, a
 * plain edit).  A reload that fails keeps the previous policy (sbx.server
 * logs why), exactly as SIGHUP does.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "server.h"

static char watched_name[NAME_MAX + 1];

static bool concerns_policy(const struct inotify_event *ev)
{
	if (ev->len == 0)
		return false;
	return !strcmp(ev->name, watched_name) || !strcmp(ev->name, "..data");
}

static void on_policy_dir(h2o_socket_t *sock, const char *err)
{
	sbx_srv *S = sbx_srv_g;
	int fd = h2o_socket_get_fd(sock);
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool reload = false;
	ssize_t n;
	(void)err;

	/* One reload for everything that arrived together (an update is
	 * several events). */
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			reload = reload || concerns_policy(ev) || (ev->mask & IN_Q_OVERFLOW);
			p += sizeof(*ev) + ev->len;
		}
	}
	if (!reload || S->draining)
		return;
	sbx_srv_log(SRV_LOG_INFO, "event=policy_changed policy=%s", S->policy);
	lua_State *L = S->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, S->reload_ref);
	sbx_srv_pcall(L, 0, 0, "reload_policy");
}

int sbx_srv_policy_watch_start(sbx_srv *S, sbx_err *err)
{
	char dir[PATH_MAX];

	if (!S->policy)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "--watch-policy needs --policy FILE (the embedded default "
				   "policy has no file to watch)");
	const char *slash = strrchr(S->policy, '/');
	const char *base = slash ? slash + 1 : S->policy;
	size_t dlen = slash ? (size_t)(slash - S->policy) : 1;
	if (!*base || strlen(base) > NAME_MAX || dlen >= sizeof(dir))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "--watch-policy: %s: not a file path", S->policy);
	snprintf(watched_name, sizeof(watched_name), "%s", base);
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(dlen ? dlen : 1), dlen ? S->policy : "/");
	int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "--watch-policy: inotify_init1: %s",
				   strerror(errno));
	if (inotify_add_watch(fd, dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR) < 0) {
		int e = errno;
		close(fd);
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, e,
				   "--watch-policy: cannot watch %s: %s", dir, strerror(e));
	}
	S->watchsock = h2o_evloop_socket_create(S->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(S->watchsock, on_policy_dir);
	sbx_srv_log(SRV_LOG_INFO, "event=policy_watch dir=%s file=%s", dir, watched_name);
	return 0;
}
