/*
 * userns.c: the user namespace of a session: id maps written from the
 * host side, and an explanation when the kernel refuses user namespaces.
 *
 * The sandbox user is uid/gid 1000 inside.  It maps to the caller's own ids
 * when the host side is unprivileged, and to a dedicated unprivileged host
 * uid when the host side is root, so the sandbox never holds host uid 0.
 *
 * When the host side is root it maps two more: inside 0 (root, which
 * sbx-init runs as) and 65534 (nobody/nogroup) map to two more dedicated
 * unprivileged host ids (aux, aux + 1).  Then the ids /etc/passwd and
 * /etc/group inside list all exist, so chown/setuid to them fail with EPERM
 * as on a host (an unmapped id gives EINVAL), and init is another user than
 * the workload: not signal-, ptrace- or prlimit-reachable from it.  Files
 * owned by host root stay unmapped (shown as nobody) and out of reach.
 * An unprivileged host side can map only its own id: 1000 alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static int write_file(const char *path, const char *data, sbx_err *err)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno, "open %s: %s", path,
				   strerror(errno));
	ssize_t n = write(fd, data, strlen(data));
	int saved = errno;
	close(fd);
	if (n != (ssize_t)strlen(data))
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, saved,
				   "write %s: %s (the kernel refused the id map)", path,
				   strerror(saved));
	return 0;
}

/* "inside host count" lines: the sandbox user's, and with aux two more. */
static void format_map(char *map, size_t len, unsigned sandbox_id, unsigned host_id, unsigned aux)
{
	if (aux)
		snprintf(map, len, "0 %u 1\n%u %u 1\n65534 %u 1\n", aux, sandbox_id, host_id,
			 aux + 1);
	else
		snprintf(map, len, "%u %u 1\n", sandbox_id, host_id);
}

int sbx_userns_write_maps(pid_t pid, uid_t host_uid, gid_t host_gid, uid_t aux, sbx_err *err)
{
	char path[64], map[128];

	/* Unprivileged writers must deny setgroups before writing gid_map;
	 * root keeps it so the zygote can drop its supplementary groups. */
	if (geteuid() != 0) {
		snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
		if (write_file(path, "deny", err) < 0)
			return -1;
	}
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	format_map(map, sizeof(map), SBX_SANDBOX_UID, (unsigned)host_uid, (unsigned)aux);
	if (write_file(path, map, err) < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	format_map(map, sizeof(map), SBX_SANDBOX_GID, (unsigned)host_gid, (unsigned)aux);
	return write_file(path, map, err);
}

static long read_long(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = -1;
	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

void sbx_userns_explain(int clone_errno, sbx_err *err)
{
	if (read_long("/proc/sys/user/max_user_namespaces") == 0) {
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, clone_errno,
			    "backend userns: user namespaces are disabled "
			    "(user.max_user_namespaces = 0); fix: sysctl -w "
			    "user.max_user_namespaces=15000");
		return;
	}
	if (geteuid() != 0 && read_long("/proc/sys/kernel/unprivileged_userns_clone") == 0) {
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, clone_errno,
			    "backend userns: unprivileged user namespaces are disabled "
			    "(kernel.unprivileged_userns_clone = 0); fix: sysctl -w "
			    "kernel.unprivileged_userns_clone=1");
		return;
	}
	if (geteuid() != 0 &&
	    read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1) {
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, clone_errno,
			    "backend userns: AppArmor restricts unprivileged user namespaces "
			    "(kernel.apparmor_restrict_unprivileged_userns = 1); fix: give sbx "
			    "an AppArmor profile with 'userns,' or set that sysctl to 0");
		return;
	}
	sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, clone_errno,
		    "backend userns: the kernel refused to create namespaces: %s; check "
		    "seccomp/AppArmor/SELinux confinement of this process (containers "
		    "often block clone(CLONE_NEWUSER))",
		    strerror(clone_errno));
}
