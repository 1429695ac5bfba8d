/*
 * zygote_exec.c: the zygote's exec into sbx-zygote, sbx's own program.
 *
 * The zygote is cloned from the caller (sbxlua, sbxd, any LuaJIT): until it
 * execs, its argv, environment and address space are the caller's, and
 * every init forked from it would show them (/proc/1/cmdline inside a run)
 * or carry them (sbxd's heap).  So once the namespaces, the root and the
 * network namespaces are built, zygote_child (session.c) packs the small
 * struct sbx_zygote_cfg into a sealed memfd and execs the sbx-zygote image
 * (zygote_image.c) through an fd opened before pivot_root: the image needs
 * no path inside the sandbox.  What crosses the exec:
 *
 *   - the blob (this file's format): a header, the cfg's bytes, the seccomp
 *     program, the carried paths; fd numbers inside the cfg stay valid
 *     because exactly those fds lose FD_CLOEXEC;
 *   - the capabilities: an exec as a non-root uid (or as root under
 *     SECBIT_NOROOT, which caps.c sets) drops them all, so the zygote puts
 *     its permitted set into the ambient set first (sbx_zygote_keep_caps);
 *   - namespaces, cgroup, rlimits, oom_score_adj, the signal mask.
 *
 * The image is built from the same sources in the same build as this
 * library, so the cfg layout matches; the header still says which layout
 * it carries (version, size), and the new program checks every length.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define BLOB_MAGIC 0x7a786273u /* "sbxz" */
/* Bump when the blob's layout changes (the cfg's own size is checked too). */
#define BLOB_VERSION 2u
#define BLOB_MAX_STRINGS (SBX_MAX_CARRY * PATH_MAX)
#define BLOB_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

struct blob_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t cfg_size;    /* sizeof(struct sbx_zygote_cfg) of the packer */
	uint32_t n_filter;    /* seccomp instructions after the cfg */
	uint32_t n_carry;     /* NUL-terminated paths after the filter */
	uint32_t strings_len; /* their bytes */
	int32_t ctl_fd;	      /* where to report a bad blob */
	int32_t listener;     /* allowlist proxy listener for the ready message, or -1 */
};

int sbx_zygote_send_fds(int ctl_fd, const void *buf, size_t len, const int *fds, size_t nfds)
{
	uint64_t until = sbx_monotonic_ms() + SBX_ZYGOTE_SEND_WAIT_MS;
	int rc;

	/* Polled: nothing tells us when the count goes down.  The zygote
	 * serves nothing meanwhile, and would fail the same way if it did. */
	while ((rc = sbx_proto_send_fds(ctl_fd, buf, len, fds, nfds)) != 0 &&
	       errno == ETOOMANYREFS && sbx_monotonic_ms() < until) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
		errno = ETOOMANYREFS;
	}
	return rc;
}

int sbx_zygote_send_ready(int ctl_fd, struct sbx_proto_ready *ready, int listener, int open_ns)
{
	int fds[2];
	size_t n = 0;

	if (ready->kind == SBX_E_NONE && listener >= 0) {
		fds[n++] = listener;
		ready->fds |= SBX_READY_LISTENER;
	}
	if (ready->kind == SBX_E_NONE && open_ns >= 0) {
		fds[n++] = open_ns;
		ready->fds |= SBX_READY_OPEN_NS;
	}
	return sbx_zygote_send_fds(ctl_fd, ready, sizeof(*ready), fds, n);
}

void sbx_zygote_fail(int ctl_fd, const sbx_err *err)
{
	struct sbx_proto_ready ready;

	memset(&ready, 0, sizeof(ready));
	ready.magic = SBX_PROTO_MAGIC;
	ready.err_no = err->sys_errno;
	ready.kind = err->kind == SBX_E_NONE ? SBX_E_EXECUTION : err->kind;
	snprintf(ready.msg, sizeof(ready.msg), "%s", err->msg);
	(void)sbx_zygote_send_ready(ctl_fd, &ready, -1, -1);
	_exit(1);
}

int sbx_zygote_keep_caps(sbx_err *err)
{
	/* The raw syscalls, not libcap: this runs in a clone3 child of a host
	 * that may have other threads (the reaper, the spares' refill), one
	 * of which may have held malloc's lock at the clone; libcap's calloc
	 * would then wait forever (the zygote never got ready). */
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	int rc = (int)syscall(SYS_capget, &h, d);

	/* Ambient needs each capability permitted and inheritable. */
	for (int i = 0; rc == 0 && i < _LINUX_CAPABILITY_U32S_3; i++)
		d[i].inheritable |= d[i].permitted;
	if (rc == 0)
		rc = (int)syscall(SYS_capset, &h, d);
	for (int c = 0; rc == 0 && c <= CAP_LAST_CAP; c++)
		if (d[CAP_TO_INDEX(c)].permitted & CAP_TO_MASK(c))
			rc = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, (unsigned long)c, 0, 0);
	if (rc != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno,
				   "caps: keep the zygote's capabilities across its exec: %s",
				   strerror(errno));
	return 0;
}

/* The fds the new program uses keep their numbers: only they lose CLOEXEC. */
static int keep_fd(int fd)
{
	return fd < 0 ? 0 : fcntl(fd, F_SETFD, 0);
}

static int pack(const struct sbx_zygote_cfg *cfg, int listener, sbx_err *err)
{
	struct blob_hdr h;
	struct sbx_zygote_cfg plain = *cfg;
	size_t lens[SBX_MAX_CARRY + 1];

	memset(&h, 0, sizeof(h));
	h.magic = BLOB_MAGIC;
	h.version = BLOB_VERSION;
	h.cfg_size = sizeof(plain);
	h.n_filter = cfg->seccomp ? cfg->seccomp->len : 0;
	h.ctl_fd = cfg->ctl_fd;
	h.listener = listener;
	while (cfg->carry[h.n_carry]) {
		lens[h.n_carry] = strlen(cfg->carry[h.n_carry]) + 1;
		h.strings_len += (uint32_t)lens[h.n_carry++];
	}
	/* Pointers mean nothing after the exec: they are rebuilt from what
	 * follows the cfg. */
	memset(plain.carry, 0, sizeof(plain.carry));
	plain.seccomp = NULL;
	plain.bwrap_argv = NULL;
	plain.host_work_dir = NULL;

	int fd = (int)syscall(SYS_memfd_create, "sbx-zygote-cfg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "memfd: %s", strerror(errno));
	bool ok = write(fd, &h, sizeof(h)) == sizeof(h) &&
		  write(fd, &plain, sizeof(plain)) == sizeof(plain);
	size_t flen = h.n_filter * sizeof(struct sock_filter);
	if (ok && flen)
		ok = write(fd, cfg->seccomp->filter, flen) == (ssize_t)flen;
	for (uint32_t i = 0; ok && i < h.n_carry; i++)
		ok = write(fd, cfg->carry[i], lens[i]) == (ssize_t)lens[i];
	if (!ok || fcntl(fd, F_ADD_SEALS, BLOB_SEALS) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
		int e = errno;
		close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "write the zygote's settings: %s",
				   strerror(e));
	}
	return fd;
}

int sbx_zygote_exec(int image_fd, const struct sbx_zygote_cfg *cfg, int listener, sbx_err *err)
{
	int blob = pack(cfg, listener, err);
	char num[16];

	if (blob < 0)
		return -1;
	snprintf(num, sizeof(num), "%d", blob);
	/* sbx's argv and environment, nothing of the caller's.  A sanitizer
	 * build passes on its options (detect_leaks and the like). */
	char *argv[] = {"sbx-zygote", num, NULL};
	char *envp[4] = {NULL};
#if defined(__SANITIZE_ADDRESS__)
	size_t ne = 0;
	static const char *const san[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
	static char san_env[3][512];
	for (size_t i = 0; i < 3; i++) {
		const char *v = getenv(san[i]);
		if (v) {
			snprintf(san_env[ne], sizeof(san_env[ne]), "%s=%s", san[i], v);
			envp[ne] = san_env[ne];
			ne++;
		}
	}
#endif
	bool ok = keep_fd(blob) == 0 && keep_fd(cfg->ctl_fd) == 0 && keep_fd(cfg->oom_fd) == 0 &&
		  keep_fd(listener) == 0;
	for (int m = 0; ok && m < SBX_NET_NMODES; m++)
		ok = keep_fd(cfg->netns_fd[m]) == 0;
	if (ok)
		syscall(SYS_execveat, image_fd, "", argv, envp, AT_EMPTY_PATH);
	int e = errno;
	close(blob);
	return sbx_err_set(
		err, SBX_E_BACKEND_UNAVAILABLE, e, "exec sbx-zygote: %s%s", strerror(e),
		e == EACCES ? " (is vm.memfd_noexec 2? sbx execs its zygote from a memfd)" : "");
}

/* Read exactly len bytes at the blob's current offset. */
static bool read_all(int fd, void *buf, size_t len)
{
	return len == 0 || read(fd, buf, len) == (ssize_t)len;
}

int sbx_zygote_unpack(const char *fd_arg, struct sbx_zygote_cfg *cfg, int *listener)
{
	static struct sock_filter filter[BPF_MAXINSNS];
	static struct sock_fprog prog;
	static char strings[BLOB_MAX_STRINGS];
	struct blob_hdr h;
	sbx_err err;
	char *end;
	long fd = fd_arg ? strtol(fd_arg, &end, 10) : -1;
	struct stat st;

	memset(&err, 0, sizeof(err));
	if (fd < 3 || *end || fstat((int)fd, &st) != 0 || !read_all((int)fd, &h, sizeof(h)) ||
	    h.magic != BLOB_MAGIC)
		return -1; /* nothing says where to report: the host sees us die */
	if (h.version != BLOB_VERSION || h.cfg_size != sizeof(*cfg) || h.n_filter > BPF_MAXINSNS ||
	    h.n_carry > SBX_MAX_CARRY || h.strings_len > sizeof(strings) ||
	    (uint64_t)st.st_size != sizeof(h) + sizeof(*cfg) +
					    h.n_filter * sizeof(struct sock_filter) +
					    h.strings_len ||
	    fcntl((int)fd, F_GET_SEALS) != BLOB_SEALS) {
		sbx_err_set(&err, SBX_E_EXECUTION, EINVAL,
			    "sbx-zygote: its settings are of another version or damaged (blob "
			    "version %u, expected %u)",
			    h.version, BLOB_VERSION);
		sbx_zygote_fail(h.ctl_fd, &err);
	}
	if (!read_all((int)fd, cfg, sizeof(*cfg)) ||
	    !read_all((int)fd, filter, h.n_filter * sizeof(struct sock_filter)) ||
	    !read_all((int)fd, strings, h.strings_len) ||
	    (h.strings_len && strings[h.strings_len - 1] != '\0')) {
		sbx_err_set(&err, SBX_E_EXECUTION, EIO, "sbx-zygote: cannot read its settings");
		sbx_zygote_fail(h.ctl_fd, &err);
	}
	close((int)fd);
	memset(cfg->carry, 0, sizeof(cfg->carry));
	const char *p = strings;
	for (uint32_t i = 0; i < h.n_carry; i++) {
		if (p >= strings + h.strings_len) {
			sbx_err_set(&err, SBX_E_EXECUTION, EINVAL,
				    "sbx-zygote: its carried paths are damaged");
			sbx_zygote_fail(h.ctl_fd, &err);
		}
		cfg->carry[i] = p;
		p += strlen(p) + 1;
	}
	prog.len = (unsigned short)h.n_filter;
	prog.filter = filter;
	cfg->seccomp = h.n_filter ? &prog : NULL;
	cfg->bwrap_argv = NULL;
	cfg->host_work_dir = NULL;
	*listener = h.listener;
	/* What stays open of ours goes at the next exec (the workload's). */
	int fds[3 + SBX_NET_NMODES] = {cfg->ctl_fd, cfg->oom_fd, h.listener};
	for (int m = 0; m < SBX_NET_NMODES; m++)
		fds[3 + m] = cfg->netns_fd[m];
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			(void)fcntl(fds[i], F_SETFD, FD_CLOEXEC);
	return 0;
}
