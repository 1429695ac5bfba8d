/*
 * zygote_exec.c: how a session's zygote gets its settings, and the exec
 * of the zygote template (zygote_template.c) into sbx-zygote.
 *
 * A zygote is cloned by the template, a small process running the
 * sbx-zygote image (zygote_image.c) that the host starts once: it never
 * shares the host's argv, environment or address space (what every init
 * forked from it would show in /proc/1/cmdline, or carry), and a clone of
 * it copies a few pages instead of the host's whole memory.  The host
 * packs what the zygote needs to set itself up (struct sbx_zygote_spawn:
 * its cfg, the root's description, the seccomp program, the carried
 * paths) into a sealed memfd, sent to the template with the fds it names
 * (this file's format):
 *
 *   - a header, the spawn's bytes (pointers cleared, fds as indices into
 *     the fds sent along), the seccomp program and its two stages, the
 *     carried paths' and
 *     the root entries' offsets, then their strings;
 *   - every length is checked by the reader; a string offset always
 *     lands on a NUL-terminated string inside the blob.
 *
 * The template image is built from the same sources in the same build as
 * this library, so the layout matches; the header still says which layout
 * it carries (version, size).
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
/* Bump when the blob's layout changes (the spawn's own size is checked too). */
#define BLOB_VERSION 4u
#define BLOB_MAX_BYTES (64u << 20)
#define BLOB_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

struct blob_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t spawn_size; /* sizeof(struct sbx_zygote_spawn) of the packer */
	uint32_t n_filter;   /* seccomp instructions after the spawn */
	uint32_t n_stage[2]; /* then the init and run stages' (sbx.h) */
	uint32_t n_carry;    /* string offsets of the carried paths */
	uint32_t n_fs;	     /* root entries */
	uint32_t strings_len;
	uint32_t hostname; /* string offsets: 0 is NULL, else offset + 1 */
	uint32_t hold_fifo;
};

/* One entry of the root's description. */
struct blob_fs {
	uint32_t kind;
	uint32_t src, dst, data; /* string offsets */
	int32_t mount_fd;	 /* index into the fds, or -1 */
	uint8_t writable, mirror, pad[2];
	uint64_t size;
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

/* The strings a blob carries, appended as they are met. */
struct strtab {
	char *buf;
	size_t len, cap;
};

static uint32_t str_add(struct strtab *t, const char *s)
{
	if (!s)
		return 0;
	size_t n = strlen(s) + 1;
	if (t->len + n > t->cap) {
		size_t cap = (t->cap ? t->cap * 2 : 4096) + n;
		char *b = realloc(t->buf, cap);
		if (!b)
			return UINT32_MAX;
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	return (uint32_t)(t->len - n + 1);
}

/* The index of fd among fds (added when new), or -1 for fd < 0. */
static int fd_index(int fd, int *fds, size_t *nfds, size_t max)
{
	if (fd < 0)
		return -1;
	if (*nfds >= max)
		return -2;
	fds[*nfds] = fd;
	return (int)(*nfds)++;
}

int sbx_zygote_pack(const struct sbx_zygote_spawn *sp, int *fds, size_t *nfds, size_t max,
		    sbx_err *err)
{
	struct blob_hdr h;
	struct sbx_zygote_spawn plain = *sp;
	struct strtab t = {NULL, 0, 0};
	uint32_t carry[SBX_MAX_CARRY];
	size_t n_fs = sp->fs ? sp->fs->n : 0;
	struct blob_fs *fe = calloc(n_fs ? n_fs : 1, sizeof(*fe));
	bool ok = fe != NULL;
	int fd = -1, bad = 0;

	memset(&h, 0, sizeof(h));
	h.magic = BLOB_MAGIC;
	h.version = BLOB_VERSION;
	h.spawn_size = sizeof(plain);
	h.n_filter = sp->cfg.seccomp ? sp->cfg.seccomp->len : 0;
	for (int k = 0; k < 2; k++) {
		const struct sock_fprog *stage = sbx_seccomp_stage(sp->cfg.seccomp, k + 1);
		h.n_stage[k] = stage ? stage->len : 0;
	}
	h.n_fs = (uint32_t)n_fs;
	*nfds = 0;
	/* fds travel as indices into what is sent along. */
	plain.sync_fd = fd_index(sp->sync_fd, fds, nfds, max);
	plain.cfg.ctl_fd = fd_index(sp->cfg.ctl_fd, fds, nfds, max);
	for (int i = 0; i < SBX_CG_NCTL; i++)
		bad |= (plain.procs[i] = fd_index(sp->procs[i], fds, nfds, max)) == -2;
	bad |= plain.sync_fd == -2 || plain.cfg.ctl_fd == -2;
	for (; ok && sp->cfg.carry[h.n_carry]; h.n_carry++)
		ok = (carry[h.n_carry] = str_add(&t, sp->cfg.carry[h.n_carry])) != UINT32_MAX;
	h.hostname = ok ? str_add(&t, sp->hostname) : 0;
	h.hold_fifo = ok ? str_add(&t, sp->hold_fifo) : 0;
	ok = ok && h.hostname != UINT32_MAX && h.hold_fifo != UINT32_MAX;
	for (size_t i = 0; ok && i < n_fs; i++) {
		const sbx_fs_entry *e = &sp->fs->e[i];
		fe[i].kind = (uint32_t)e->kind;
		fe[i].src = str_add(&t, e->src);
		fe[i].dst = str_add(&t, e->dst);
		fe[i].data = str_add(&t, e->data);
		fe[i].mount_fd = fd_index(e->mount_fd, fds, nfds, max);
		fe[i].writable = e->writable;
		fe[i].mirror = e->mirror;
		fe[i].size = e->size;
		ok = fe[i].src != UINT32_MAX && fe[i].dst != UINT32_MAX && fe[i].data != UINT32_MAX;
		bad |= fe[i].mount_fd == -2;
	}
	h.strings_len = (uint32_t)t.len;
	/* Pointers mean nothing in another process: they are rebuilt from
	 * what follows the spawn. */
	memset(plain.cfg.carry, 0, sizeof(plain.cfg.carry));
	plain.cfg.seccomp = NULL;
	plain.cfg.bwrap_argv = NULL;
	plain.cfg.host_work_dir = NULL;
	memset(plain.cfg.idmap_path, 0, sizeof(plain.cfg.idmap_path)); /* bubblewrap's only */
	plain.cfg.n_idmap = 0;
	plain.fs = NULL;
	plain.hostname = plain.hold_fifo = NULL;
	if (bad) {
		free(fe);
		free(t.buf);
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "too many idmapped paths for one session (at most %zu)",
				   max - 3 - SBX_CG_NCTL);
	}
	if (ok)
		fd = (int)syscall(SYS_memfd_create, "sbx-zygote-cfg",
				  MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ok = ok && fd >= 0 && write(fd, &h, sizeof(h)) == sizeof(h) &&
	     write(fd, &plain, sizeof(plain)) == sizeof(plain);
	for (int k = 0; k < 3; k++) {
		const struct sock_fprog *f =
			k ? sbx_seccomp_stage(sp->cfg.seccomp, k) : sp->cfg.seccomp;
		size_t flen = (k ? h.n_stage[k - 1] : h.n_filter) * sizeof(struct sock_filter);
		if (ok && flen)
			ok = write(fd, f->filter, flen) == (ssize_t)flen;
	}
	if (ok && h.n_carry)
		ok = write(fd, carry, h.n_carry * sizeof(carry[0])) ==
		     (ssize_t)(h.n_carry * sizeof(carry[0]));
	if (ok && n_fs)
		ok = write(fd, fe, n_fs * sizeof(*fe)) == (ssize_t)(n_fs * sizeof(*fe));
	if (ok && t.len)
		ok = write(fd, t.buf, t.len) == (ssize_t)t.len;
	int e = errno ? errno : ENOMEM;
	free(fe);
	free(t.buf);
	if (!ok || fcntl(fd, F_ADD_SEALS, BLOB_SEALS) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
		e = ok ? errno : e;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "write the zygote's settings: %s",
				   strerror(e));
	}
	return fd;
}

int sbx_zygote_exec_template(int image_fd, int sock)
{
	char num[16];

	snprintf(num, sizeof(num), "%d", sock);
	/* sbx's argv and environment, nothing of the caller's.  A sanitizer
	 * build passes on its options (detect_leaks and the like). */
	char *argv[] = {"sbx-zygote", "template", num, NULL};
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
	if (fcntl(sock, F_SETFD, 0) == 0)
		syscall(SYS_execveat, image_fd, "", argv, envp, AT_EMPTY_PATH);
	return -1;
}

/* The string at offset off (0: NULL); *ok false when it lies outside. */
static const char *str_at(const char *strings, uint32_t len, uint32_t off, bool *ok)
{
	if (off == 0)
		return NULL;
	if (off - 1 >= len) {
		*ok = false;
		return NULL;
	}
	return strings + off - 1;
}

/* The fd at index i of what came along (-1 stays -1). */
static int fd_at(int i, const int *fds, size_t nfds, bool *ok)
{
	if (i < 0)
		return -1;
	if ((size_t)i >= nfds) {
		*ok = false;
		return -1;
	}
	return fds[i];
}

int sbx_zygote_unpack(int blob, const int *fds, size_t nfds, struct sbx_zygote_spawn *sp)
{
	/* As sbx_seccomp_compile lays them out: whole, init, run. */
	static struct sock_fprog prog[SBX_SC_NSTAGES];
	struct blob_hdr h;
	struct stat st;
	bool ok = true;

	if (fstat(blob, &st) != 0 || st.st_size < (off_t)sizeof(h) ||
	    st.st_size > (off_t)BLOB_MAX_BYTES || fcntl(blob, F_GET_SEALS) != BLOB_SEALS)
		return -1;
	char *buf = malloc((size_t)st.st_size);
	if (!buf || pread(blob, buf, (size_t)st.st_size, 0) != st.st_size)
		return -1;
	memcpy(&h, buf, sizeof(h));
	uint64_t want =
		sizeof(h) + (uint64_t)sizeof(*sp) +
		((uint64_t)h.n_filter + h.n_stage[0] + h.n_stage[1]) * sizeof(struct sock_filter) +
		(uint64_t)h.n_carry * sizeof(uint32_t) + (uint64_t)h.n_fs * sizeof(struct blob_fs) +
		h.strings_len;
	if (h.magic != BLOB_MAGIC || h.version != BLOB_VERSION || h.spawn_size != sizeof(*sp) ||
	    h.n_filter > BPF_MAXINSNS || h.n_stage[0] > BPF_MAXINSNS ||
	    h.n_stage[1] > BPF_MAXINSNS || !h.n_filter != !h.n_stage[0] ||
	    !h.n_stage[0] != !h.n_stage[1] || h.n_carry > SBX_MAX_CARRY ||
	    h.n_fs > SBX_FS_MAX_ENTRIES || want != (uint64_t)st.st_size)
		return -1;
	const char *p = buf + sizeof(h);
	memcpy(sp, p, sizeof(*sp));
	p += sizeof(*sp);
	uint32_t lens[SBX_SC_NSTAGES] = {h.n_filter, h.n_stage[0], h.n_stage[1]};
	for (int k = 0; k < SBX_SC_NSTAGES; k++) {
		prog[k].len = (unsigned short)lens[k];
		prog[k].filter = (struct sock_filter *)(void *)p;
		p += lens[k] * sizeof(struct sock_filter);
	}
	const char *carry = p;
	p += h.n_carry * sizeof(uint32_t);
	const char *fsp = p;
	p += h.n_fs * sizeof(struct blob_fs);
	const char *strings = p;
	if (h.strings_len && strings[h.strings_len - 1] != '\0')
		return -1;
	memset(sp->cfg.carry, 0, sizeof(sp->cfg.carry));
	for (uint32_t i = 0; i < h.n_carry; i++) {
		uint32_t off;
		memcpy(&off, carry + i * sizeof(off), sizeof(off));
		sp->cfg.carry[i] = str_at(strings, h.strings_len, off, &ok);
		ok = ok && sp->cfg.carry[i];
	}
	sp->hostname = str_at(strings, h.strings_len, h.hostname, &ok);
	sp->hold_fifo = str_at(strings, h.strings_len, h.hold_fifo, &ok);
	static sbx_rootfs fs;
	fs.n = h.n_fs;
	fs.e = calloc(h.n_fs ? h.n_fs : 1, sizeof(*fs.e));
	if (!fs.e)
		return -1;
	for (uint32_t i = 0; ok && i < h.n_fs; i++) {
		struct blob_fs b;
		memcpy(&b, fsp + i * sizeof(b), sizeof(b));
		sbx_fs_entry *e = &fs.e[i];
		e->kind = (sbx_fs_kind)b.kind;
		e->src = str_at(strings, h.strings_len, b.src, &ok);
		e->dst = str_at(strings, h.strings_len, b.dst, &ok);
		e->data = (char *)str_at(strings, h.strings_len, b.data, &ok);
		e->mount_fd = fd_at(b.mount_fd, fds, nfds, &ok);
		e->writable = b.writable;
		e->mirror = b.mirror;
		e->size = b.size;
		e->own = NULL;
		e->idmap_ns = e->src_fd = -1;
		/* Every entry names where it goes. */
		ok = ok && e->dst && e->dst[0] == '/';
	}
	sp->fs = &fs;
	sp->sync_fd = fd_at(sp->sync_fd, fds, nfds, &ok);
	sp->cfg.ctl_fd = fd_at(sp->cfg.ctl_fd, fds, nfds, &ok);
	for (int i = 0; i < SBX_CG_NCTL; i++)
		sp->procs[i] = fd_at(sp->procs[i], fds, nfds, &ok);
	sp->cfg.seccomp = h.n_filter ? prog : NULL;
	sp->cfg.bwrap_argv = NULL;
	sp->cfg.host_work_dir = NULL;
	return ok && sp->cfg.ctl_fd >= 0 && sp->sync_fd >= 0 ? 0 : -1;
}
