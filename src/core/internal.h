/*
 * internal.h: what the parts of libsbx share and nobody else sees: the
 * host <-> zygote protocol, the init -> host status records, and the
 * child-side entry points.
 *
 * Processes of one session:
 *
 *   host (sbxlua/sbxd) --ctl socket--> zygote (PID 1 of the session's
 *   namespaces) --clone(NEWPID|NEWNS)--> sbx-init (PID 1 of one run)
 *   --fork--> workload (drops privileges, seccomp, execve)
 *
 * sbx-init writes fixed-size status records (<= PIPE_BUF, so each write is
 * atomic) straight to the host over a pipe the host passed in the request.
 */
#ifndef SBX_INTERNAL_H
#define SBX_INTERNAL_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx.h"

#define SBX_PROTO_MAGIC 0x73627831u /* "sbx1" */
/* Largest argv + env + cwd payload of one run request. */
#define SBX_PROTO_MAX_PAYLOAD (256u * 1024u)

/* Host -> zygote: start one run.  Followed in the same message by the
 * payload: cwd '\0' argv[0] '\0' ... env[0] '\0' ... and carrying 4 fds
 * (SCM_RIGHTS): stdin, stdout, stderr, status-pipe write end. */
struct sbx_proto_run {
	uint32_t magic;
	uint32_t argc;
	uint32_t envc;
	uint32_t timeout_ms;
	uint32_t grace_ms;
	uint32_t payload_len;
};

/* Zygote -> host: a warm init, ready for one run request.  Carries (as
 * SCM_RIGHTS) the init's pidfd and the socket the request goes to.  The
 * host answers each offer it takes with the magic as a uint32, which asks
 * for the next one. */
struct sbx_proto_offer {
	uint32_t magic;
	int32_t err_no;     /* 0 on success */
	int32_t pid;        /* init's pid in the session namespace */
};

/* Zygote -> host, once, when the session's root is built (or why not). */
struct sbx_proto_ready {
	uint32_t magic;
	int32_t err_no;
	uint32_t kind;      /* sbx_err_kind on failure */
	char msg[520];
};

enum sbx_status_type {
	SBX_STATUS_ERROR = 'E', /* setup failed before exec: msg says why */
	SBX_STATUS_EXIT = 'X',  /* the workload ended: wstatus, how */
};

struct sbx_status_rec {
	uint32_t type;
	int32_t wstatus;
	int32_t err_no;
	uint32_t timed_out; /* init's timer fired before the exit */
	char msg[240];
};

/* Send one run request with its 4 fds; 0, or -1 with errno. */
int sbx_proto_send_run(int sock, const struct sbx_proto_run *req, const char *payload,
		       const int fds[4]);
/* Receive one: 0 on a valid request, 1 on EOF, 2 on EINTR, -1 on garbage
 * (its fds are closed).  payload must hold SBX_PROTO_MAX_PAYLOAD bytes. */
int sbx_proto_recv_run(int sock, struct sbx_proto_run *req, char *payload, int fds[4]);

/* Most mounts carried under a run's fresh /tmp and /dev/shm. */
#define SBX_MAX_CARRY 32

/* What the zygote needs to build runs; lives in the zygote's memory. */
struct sbx_zygote_cfg {
	int ctl_fd;
	const char *carry[SBX_MAX_CARRY + 1]; /* inside paths to re-attach, NULL-ended */
	const struct sock_fprog *seccomp;
	uint64_t tmp_bytes;
	uint64_t shm_bytes;
	uint64_t lifetime_ms;
};

/* Child side of the session (rootfs.c): build the root, pivot into it.
 * Runs in the zygote after the id maps are written. */
int sbx_rootfs_build(const sbx_session_opts *opts, const char *host_work_dir,
		     sbx_err *err);
/* Child side of a run (rootfs.c): per-run mounts in init's mount ns. */
int sbx_rootfs_run_mounts(const struct sbx_zygote_cfg *cfg, sbx_err *err);
/* Is an inside path below the per-run /tmp or /dev/shm? */
bool sbx_rootfs_is_scratch(const char *path);

/* The zygote's loop (zygote.c); never returns. */
__attribute__((noreturn)) void sbx_zygote_main(const struct sbx_zygote_cfg *cfg);

/* sbx-init (init.c): PID 1 of a run; never returns.  It is started ahead
 * of the request: it makes the run's mounts and forks a workload that drops
 * every privilege, then both wait until the zygote passes the request on
 * over sock. */
__attribute__((noreturn)) void sbx_init_main(const struct sbx_zygote_cfg *cfg, int sock);

/* Write a status record; used by init and the workload before exec. */
void sbx_status_send(int fd, uint32_t type, int wstatus, int err_no, uint32_t timed_out,
		     const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Close every fd >= 3 except those in keep (n entries). */
void sbx_close_fds_except(const int *keep, size_t n);

/* Raw syscalls glibc 2.36 may lack. */
int sbx_sys_pidfd_send_signal(int pidfd, int sig);
pid_t sbx_sys_clone3_fork(uint64_t flags, int *pidfd_out);

/* Take the session's warm init (session.c, for run.c): its request socket
 * and pidfd become the caller's, and the zygote is asked for the next.
 * Returns 0, or -1 with err (SessionClosed when the zygote is gone). */
int sbx_session_take_warm(sbx_session *s, int *sock, int *pidfd, sbx_err *err);

/* uid/gid maps (userns.c). */
int sbx_userns_write_maps(pid_t pid, uid_t host_uid, gid_t host_gid, sbx_err *err);
/* Explain why user namespaces are unavailable, for BackendUnavailable. */
void sbx_userns_explain(int clone_errno, sbx_err *err);

#endif
