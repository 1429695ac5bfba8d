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
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx.h"
#include "rootfs_desc.h"

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
	/* Non-zero: a pty of this size (pty.c); the stdin fd is then a socket
	 * the workload sends the master back on, stdout and stderr unused. */
	uint16_t pty_rows, pty_cols;
};

/* Zygote -> host: a warm init, ready for one run request.  Carries (as
 * SCM_RIGHTS) the init's pidfd and the socket the request goes to.  The
 * host answers each offer it takes with the magic as a uint32, which asks
 * for the next one. */
struct sbx_proto_offer {
	uint32_t magic;
	int32_t err_no; /* 0 on success */
	int32_t pid;	/* init's pid in the session namespace */
	uint32_t mode;	/* sbx_net: the network namespace the init is in */
};

/* Host -> zygote, for each offer taken (or turned down): start the next
 * warm init, in the network namespace of this mode.  SBX_NET_OWN (asked
 * for outside that count, by session_ownnet.c) is an init in a network
 * namespace of its own, made for it, with a proxy listener inside: before
 * the init exists the zygote queues on its request socket one message
 * "L" carrying that listener, which the host reads first. */
#define SBX_NET_OWN ((uint32_t)SBX_NET_NMODES)
struct sbx_proto_want {
	uint32_t magic;
	uint32_t mode; /* sbx_net */
};

/* Host -> zygote, once, when a spare session is taken (spare.c): the
 * session's end, counted from the take (a spare is made without one).
 * Inits the zygote starts after it enforce it; the host drops the ones
 * offered before (sbx_session_adopt). */
#define SBX_PROTO_EXPIRE 0x45585052u /* in sbx_proto_want.mode's place */
struct sbx_proto_expire {
	uint32_t magic;
	uint32_t kind; /* SBX_PROTO_EXPIRE */
	uint64_t expire_at_ms;
	uint64_t lifetime_ms;
	uint32_t expire_grace_ms;
	uint32_t pad;
};

/* Zygote -> host, once, when the session's root is built (or why not).
 * Open mode: once before that too, as soon as the open namespace exists,
 * with SBX_READY_EARLY and only that namespace (the host connects it while
 * the root is built). */
struct sbx_proto_ready {
	uint32_t magic;
	int32_t err_no;
	uint32_t kind;	      /* sbx_err_kind on failure */
	uint32_t fds;	      /* SCM_RIGHTS it carries, in this order: */
#define SBX_READY_LISTENER 1u /* the allowlist namespace's proxy listener */
#define SBX_READY_OPEN_NS 2u  /* the open mode's network namespace */
#define SBX_READY_EARLY 4u    /* not the ready message: the open namespace, early */
	char msg[520];
};

enum sbx_status_type {
	SBX_STATUS_ERROR = 'E', /* setup failed before exec: msg says why */
	SBX_STATUS_EXIT = 'X',	/* the workload ended: wstatus, how */
};
#define SBX_STATUS_EXPIRED 2u

struct sbx_status_rec {
	uint32_t type;
	int32_t wstatus;
	int32_t err_no;
	uint32_t timed_out; /* init's timer fired before the exit: 1 the run's, */
			    /* SBX_STATUS_EXPIRED the session's lifetime */
	char msg[240];
	/* ERROR: non-empty when the run request's option of that name is wrong
	 * (the caller's InvalidArgument); msg then starts with it. */
	char option[16];
};

/* Most fds one message carries: the kernel's SCM_MAX_FD (a zygote's
 * settings travel to the template with every fd they name). */
#define SBX_PROTO_MAX_FDS 253
/* Send one message of len bytes carrying nfds (<= SBX_PROTO_MAX_FDS) fds
 * as SCM_RIGHTS; 0, or -1 with errno. */
int sbx_proto_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds);
/* Receive one message into buf and at most max fds (CLOEXEC; any beyond
 * are closed): the bytes received (0 at EOF) or -1 with errno; *nfds says
 * how many fds came. */
ssize_t sbx_proto_recv_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *nfds);
/* Send one run request with its 4 fds; 0, or -1 with errno. */
int sbx_proto_send_run(int sock, const struct sbx_proto_run *req, const char *payload,
		       const int fds[4]);
/* Receive one: 0 on a valid request, 1 on EOF, 2 on EINTR, -1 on garbage
 * (its fds are closed).  payload must hold SBX_PROTO_MAX_PAYLOAD bytes. */
int sbx_proto_recv_run(int sock, struct sbx_proto_run *req, char *payload, int fds[4]);

/* ---- a run's pseudo-terminal (pty.c) ---- */

/* Workload side, after the request: open a pty in the run's own devpts,
 * make it the controlling terminal and stdio 0-2, send the master on sock.
 * 0, or -1 with errno and *what naming the failed step. */
int sbx_pty_open_inside(int sock, uint16_t rows, uint16_t cols, const char **what);
/* Host side: the checked master (non-blocking, CLOEXEC); -2 when the
 * workload ended without one (its status says why); -1 with err. */
int sbx_pty_recv_master(int sock, int timeout_ms, sbx_err *err);
/* TIOCSWINSZ on the master: SIGWINCH to the foreground group. */
int sbx_pty_resize(int master, uint16_t rows, uint16_t cols, sbx_err *err);
/* TIOCSIG: signo (INT, QUIT, TSTP, KILL) to the foreground group; 0/-1. */
int sbx_pty_signal(int master, int signo);

/* ---- GPUs (gpu.c) ---- */

#define SBX_GPU_MAX 16
#define SBX_GPU_MAX_NODES 64
#define SBX_GPU_MAX_LIBS 256

/* What one session was given: device nodes (host path and inside path,
 * with the device-cgroup rule for each), driver files to bind read-only,
 * and the per-GPU lock files that keep two sessions off one GPU. */
typedef struct sbx_gpu {
	uint32_t n;
	int index[SBX_GPU_MAX];
	int lock_fd[SBX_GPU_MAX];
	size_t n_nodes, n_libs;
	char *host_node[SBX_GPU_MAX_NODES + 1];
	const char *inside_node[SBX_GPU_MAX_NODES + 1]; /* NULL-terminated */
	const char *rule[SBX_GPU_MAX_NODES + 1];	/* "c MAJ:MIN rw" */
	char *lib[SBX_GPU_MAX_LIBS + 1];
} sbx_gpu;

/* Pick o->gpus free GPUs of o->gpu_dev_dir (locks under lock_dir unless
 * o->gpu_shared), collect their nodes, rules and driver files.  Over what
 * exists or all taken: BackendUnavailable. */
int sbx_gpu_prepare(sbx_gpu *g, const sbx_session_opts *o, const char *lock_dir, sbx_err *err);
/* Free what prepare allocated, release the locks.  Safe when empty. */
void sbx_gpu_release(sbx_gpu *g);

/* idmap.c: as root, each of o's read_write_paths in fs that the sandbox's
 * host ids (to_uid/gid) do not own gets an idmapped detached copy of its
 * mount (e->mount_fd) mapping its owner to them, or with per_run only the
 * user namespace of that map (e->idmap_ns) for sbx_idmap_tree to make a
 * copy per run; *any says whether one did.  0, or -1 with err.  close:
 * the copies (all: the namespaces too). */
struct sbx_zygote_cfg;
int sbx_idmap_prepare(sbx_rootfs *fs, const sbx_session_opts *o, uid_t to_uid, gid_t to_gid,
		      bool per_run, bool *any, sbx_err *err);
int sbx_idmap_tree(const sbx_fs_entry *e, sbx_err *err);
/* As root: the work dir owned by owner_uid/gid, seen by the sandbox's host
 * ids to_uid/gid.  Another owner (a pinned dir) gets an idmap mapping it to
 * them (*ns: its user namespace, else -1); no idmap possible: refused
 * (InvalidArgument), never a chown.  Native backends: the work dir's
 * entries (src == work_dir) get a copy of its mount (e->mount_fd), which
 * the zygote attaches without a path it might not be allowed to walk;
 * per_run (bubblewrap): only *ns, each run copies (sbx_idmap_copy).  0, or
 * -1 with err. */
int sbx_idmap_work_dir(sbx_rootfs *fs, const char *work_dir, uid_t owner_uid, gid_t owner_gid,
		       uid_t to_uid, gid_t to_gid, bool per_run, int *ns, sbx_err *err);
/* A detached nosuid, nodev copy of path's mount (of fd's, when fd >= 0:
 * the dir pinned at the session's start, whatever is at path now),
 * idmapped with ns unless -1 (what names path's role in errors): fd, or -1
 * with err. */
int sbx_idmap_copy(const char *what, const char *path, int fd, int ns, sbx_err *err);
void sbx_idmap_close(sbx_rootfs *fs, bool all);
/* In a bubblewrap run's workload, still root: a mount namespace of its
 * own with cfg's idmapped copies over their paths.  0, or -1 with errno
 * (ESTALE: a read_write_path's path leads to another dir than its copy's). */
int sbx_idmap_attach_private(const struct sbx_zygote_cfg *cfg);

/* Most mounts carried under a run's fresh /tmp and /dev/shm. */
#define SBX_MAX_CARRY 32

/* What the zygote needs to build runs; lives in the zygote's memory.  It
 * travels from the host to the zygote template as raw bytes
 * (zygote_exec.c): scalars travel as they are, fds as indices into the
 * fds sent along; a new pointer or fd field must be packed there. */
struct sbx_zygote_cfg {
	int ctl_fd;
	const char *carry[SBX_MAX_CARRY + 1]; /* inside paths to re-attach, NULL-ended */
	const struct sock_fprog *seccomp;
	uint64_t tmp_bytes;
	uint64_t shm_bytes;
	uint64_t lifetime_ms;
	/* The session's end (CLOCK_MONOTONIC ms, the host's clock: every
	 * process of a session reads the same; 0: none): each run's init
	 * sends SIGTERM then, SIGKILL expire_grace_ms later (init.c). */
	uint64_t expire_at_ms;
	uint32_t expire_grace_ms;
	uint32_t warm_runs; /* offers kept outstanding (>= 1) */
	uint32_t idle_ms;   /* a warm run with no request this long ends; 0: never */
	uid_t uid;	    /* the workload's uid/gid (as seen by init) */
	gid_t gid;
	uint64_t nofile;	 /* RLIMIT_NOFILE of the workload */
	uint64_t fsize;		 /* RLIMIT_FSIZE; 0: unlimited */
	int oom_fd;		 /* the zygote's own oom_score_adj, or -1 */
	char oom_adj[8];	 /* what it is between clones ("0" or "-1000") */
	bool memory_limited;	 /* the session has a memory ceiling */
	bool reuse;		 /* an init may serve run after run (init.c) */
	bool none;		 /* backend "none"/"bubblewrap": the host forks each init */
	char *const *bwrap_argv; /* backend "bubblewrap": bwrap and its fixed arguments */
	int userns_fd;		 /* bubblewrap as root: the session's user namespace
				    * (userns.c's full map) for bwrap --userns, or -1 */
	int bwrap_data_fd[SBX_FS_MAX_DATA]; /* bubblewrap: sealed memfds of the generated files
				    * bwrap_argv names (--ro-bind-data), or -1 */
	const char *host_work_dir;	    /* backend "none": where the work dir really is */
	/* bubblewrap as root: this run's idmapped read_write_paths (idmap.c),
	 * the host process's memory only (never the zygote's). */
	int idmap_fd[SBX_MAX_CARRY];
	const char *idmap_path[SBX_MAX_CARRY];
	bool idmap_stage[SBX_MAX_CARRY]; /* over the stage, not the dir it copies */
	size_t n_idmap;
	int netns_fd[SBX_NET_NMODES]; /* one network namespace per mode, or -1 */
	sbx_net warm_mode;	      /* the mode of the first warm inits */
	uint16_t proxy_port;	      /* where SBX_NET_OWN namespaces listen */
};

/* ---- network namespaces (netns.c) ---- */

const char *sbx_net_name(sbx_net mode);
/* Bring up lo in the caller's network namespace. */
int sbx_netns_lo_up(sbx_err *err);
/* A child makes a network namespace with lo up (while the caller goes on):
 * its socket, or -1 with err.  Join it: the namespace's fd (the caller is
 * in it now; *sock is closed, the child ends by itself and is the
 * caller's to reap), or -1 with err naming what failed. */
int sbx_netns_child_start(sbx_err *err);
int sbx_netns_child_join(int *sock, sbx_err *err);
/* In the zygote, in the blocked namespace fd[BLOCKED] (the caller's): for
 * each wider mode up to ceiling a new one with lo up (allowlist: *listener
 * listening on 127.0.0.1:port inside it).  We end in the blocked one.  -1
 * with err. */
int sbx_netns_prepare(int fd[SBX_NET_NMODES], int *listener, sbx_net ceiling, uint16_t port,
		      sbx_err *err);
/* In the zygote: a new network namespace with lo up and *listener on
 * 127.0.0.1:port, for one run with an allow-list of its own; we are left
 * in it (the caller clones the init there, then steps back).  -1 with err. */
int sbx_netns_own(uint16_t port, int *listener, sbx_err *err);

/* Inodes a size-capped tmpfs of ours may hold: one per 4 KiB of its size,
 * at least 4096.  Without a cap the kernel allows one per page of RAM / 2,
 * so a sandbox creating empty files would fill kernel memory long before
 * the size cap; with it an inode fill ends in ENOSPC like a byte fill. */
static inline uint64_t sbx_tmpfs_inodes(uint64_t bytes)
{
	return bytes / 4096 > 4096 ? bytes / 4096 : 4096;
}

/* Child side of the session (rootfs.c): build the root, pivot into it.
 * Runs in the zygote after the id maps are written. */
int sbx_rootfs_build(const sbx_rootfs *fs, const char *hostname, sbx_err *err);
/* Child side of a run (rootfs.c): per-run mounts in init's mount ns. */
int sbx_rootfs_run_mounts(const struct sbx_zygote_cfg *cfg, sbx_err *err);
/* What the per-run /tmp and /dev/shm hold (statfs free blocks and inodes),
 * so a reused init can tell whether the last run left anything there. */
typedef struct sbx_scratch_mark {
	uint64_t tmp_blocks, tmp_inodes, shm_blocks, shm_inodes;
} sbx_scratch_mark;
void sbx_rootfs_scratch_mark(sbx_scratch_mark *m);
/* Before a reused init's next run: when /tmp or /dev/shm differ from m,
 * replace both with fresh ones (and re-carry what they cover).  0, or -1
 * with err (the init must not serve again). */
int sbx_rootfs_scratch_reset(const struct sbx_zygote_cfg *cfg, const sbx_scratch_mark *m,
			     sbx_err *err);
/* Check a policy's /etc entry name: 1 bind it, 0 skip it (passwd, group,
 * hosts, hostname are generated; shadow, gshadow never bound), -1 with err
 * for a name that is not plain. */
int sbx_rootfs_etc_entry(const char *name, sbx_err *err);
/* Is an inside path below the per-run /tmp or /dev/shm? */
bool sbx_rootfs_is_scratch(const char *path);

/* Backends none and bubblewrap have no PID namespace per run, and a run's
 * processes may leave its process group and session (bwrap's do): the host
 * asks init with this signal to SIGKILL the run, which init does to every
 * descendant it has, orphans included (it is their subreaper).  A plain
 * SIGKILL of init would leave them running. */
#define SBX_SIG_KILL_RUN 40

/* The zygote's loop (zygote.c); never returns. */
__attribute__((noreturn)) void sbx_zygote_main(const struct sbx_zygote_cfg *cfg);

/* ---- the zygote template and the zygote's settings (zygote_template.c,
 * zygote_exec.c, src/zygote) ---- */

/* Host: the sealed memfd holding the sbx-zygote program embedded in libsbx,
 * made once per process (CLOEXEC); -1 with err. */
int sbx_zygote_image_fd(sbx_err *err);
struct sbx_zygote_spawn; /* what a zygote sets itself up from (below) */
/* Pack sp into a sealed memfd; the fds it names go into fds (at most max),
 * which travel with it.  The memfd, or -1 with err. */
int sbx_zygote_pack(const struct sbx_zygote_spawn *sp, int *fds, size_t *nfds, size_t max,
		    sbx_err *err);
/* Template's child: sp from the blob and the fds that came with it.  0, or
 * -1 when it is damaged. */
int sbx_zygote_unpack(int blob, const int *fds, size_t nfds, struct sbx_zygote_spawn *sp);
/* Host's child: exec image_fd as the template serving sock.  Returns only
 * on failure (-1, errno). */
int sbx_zygote_exec_template(int image_fd, int sock);
/* Host: a new zygote cloned by this process's template (started at the
 * first call, and again when it died) into the namespaces of flags, a
 * child of ours (CLONE_PARENT).  Its pid, or -1 with err (and
 * *clone_errno when the kernel refused the clone itself, else 0). */
pid_t sbx_zygote_template_spawn(uint64_t flags, const struct sbx_zygote_spawn *sp, int *clone_errno,
				sbx_err *err);
/* sbx-zygote as the template: serve sock until the host closes it. */
__attribute__((noreturn)) void sbx_zygote_template_main(int sock);
/* The template's child: set the zygote up from sp (the id maps, the
 * cgroup, the root, the network namespaces), say ready, become it. */
__attribute__((noreturn)) void sbx_zygote_setup(struct sbx_zygote_spawn *sp);
/* Zygote -> host: a message with fds, waiting up to SBX_ZYGOTE_SEND_WAIT_MS
 * while the kernel refuses them for our uid's fds in flight (ETOOMANYREFS:
 * that uid is shared by every session's zygote; other hosts reading their
 * offers bring the count down).  0, or -1 with errno. */
#define SBX_ZYGOTE_SEND_WAIT_MS 5000
int sbx_zygote_send_fds(int ctl_fd, const void *buf, size_t len, const int *fds, size_t nfds);
/* Zygote -> host: the ready message, with the listener and the open mode's
 * namespace when it says success. */
int sbx_zygote_send_ready(int ctl_fd, struct sbx_proto_ready *ready, int listener, int open_ns);
/* Report err as the ready message, and end. */
__attribute__((noreturn)) void sbx_zygote_fail(int ctl_fd, const sbx_err *err);

/* sbx-init (init.c): PID 1 of a run; never returns.  It is started ahead
 * of the request: it makes the run's mounts and forks a workload that drops
 * every privilege, then both wait until the zygote passes the request on
 * over sock. */
__attribute__((noreturn)) void sbx_init_main(const struct sbx_zygote_cfg *cfg, int sock);
/* Put the init stage of cfg's filter on the calling init (no_new_privs
 * first), once: its workloads then install only the run stage (sbx.h).
 * 1 when on, 0 when cfg has no stages (workloads install the whole filter),
 * -1 with err. */
int sbx_init_stage_install(const struct sbx_zygote_cfg *cfg, sbx_err *err);

/* The workload's privilege drop, one ordered step list per backend
 * (privdrop.c): 0, or -1 with the failed step in *f (what: its name or
 * message, err_no: its cause).  filter: the seccomp program the native
 * backends install last (cfg's whole filter, or its run stage on top of an
 * init stage already on: init.c). */
struct sbx_privdrop_fail {
	const char *what;
	int err_no;
	sbx_err err; /* what points here for steps that fill an sbx_err */
};
int sbx_privdrop(const struct sbx_zygote_cfg *cfg, const struct sock_fprog *filter,
		 struct sbx_privdrop_fail *f);
/* Backend bubblewrap, in a run's workload: check the cwd and program, exec
 * bwrap (backend_bubblewrap_run.c); failures go to status_fd, exit 127. */
__attribute__((noreturn)) void sbx_bwrap_run_exec(const struct sbx_zygote_cfg *cfg, const char *cwd,
						  const char **argv, const char **envp,
						  int status_fd);

/* Write a status record; used by init and the workload before exec. */
void sbx_status_send(int fd, uint32_t type, int wstatus, int err_no, uint32_t timed_out,
		     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* An ERROR record blaming the request's option (e.g. "cwd"); fmt's text
 * starts with the option's name. */
void sbx_status_send_option(int fd, const char *option, int err_no, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Close every fd >= 3 except those in keep (n entries). */
void sbx_close_fds_except(const int *keep, size_t n);

/* Raw syscalls glibc 2.36 may lack.  pidfd_send_signal sends SI_QUEUE
 * with the value SBX_SIG_MARK: sbx-init forwards to a run only a signal so
 * marked (and, with a PID namespace, from outside it), so a stray one (a
 * terminal's Ctrl-C, a kill of a process group) never reaches a run. */
#define SBX_SIG_MARK 0x73627873 /* "sbxs" */
int sbx_sys_pidfd_send_signal(int pidfd, int sig);
pid_t sbx_sys_clone3_fork(uint64_t flags, int *pidfd_out);
/* Ids for a child of sbx_sys_clone3_fork (or anything it forks): the raw,
 * per-thread syscalls, never glibc's process-wide wrappers, which wait
 * for the host's other threads and hang in such a child (sys.c).
 * drop_groups: setgroups(0) (EPERM, a denied setgroups, is nothing to
 * drop); set_ids: setresgid, then setresuid.  0, or -1 with errno. */
int sbx_sys_drop_groups(void);
int sbx_sys_set_ids(uid_t uid, gid_t gid);
/* After a fork or clone failed: at a full pids ceiling (EAGAIN, which lasts
 * while another run of the session holds every pid, or one that did is
 * still being reaped) sleep 10 ms and return true, up to 2 s in all counted
 * in *tries; false for any other error or once the time is up (errno
 * kept). */
bool sbx_sys_fork_retry(int *tries);
/* CLOCK_MONOTONIC in ms (the same in every process of the host). */
uint64_t sbx_monotonic_ms(void);
/* A sealed (read-only for good) memfd holding data, CLOEXEC, at offset 0;
 * -1 with errno. */
int sbx_sealed_data_fd(const char *name, const void *data, size_t len);

/* ---- cgroups (cgroup.c) ---- */

enum { SBX_CG_MEMORY, SBX_CG_CPU, SBX_CG_CPUACCT, SBX_CG_PIDS, SBX_CG_DEVICES, SBX_CG_NCTL };

typedef struct sbx_cgroup_limits {
	uint64_t memory_bytes;
	uint32_t cpu_milli;
	uint32_t pids_max;
	const char *const *devices; /* "c MAJ:MIN rwm" rules to allow */
	size_t n_devices;
} sbx_cgroup_limits;

/* A session's cgroup: one dir (v2) or one per controller (v1). */
typedef struct sbx_cgroup {
	int version; /* 0: none, 1 or 2 */
	bool made[SBX_CG_NCTL];
	char dir[SBX_CG_NCTL][PATH_MAX]; /* v2: dir[0] only */
	char oom_path[PATH_MAX];	 /* memory.events / memory.oom_control */
	int64_t oom_base;		 /* oom_kill count at creation */
	char leaf[PATH_MAX];		 /* v2 with a memory ceiling: <dir>/zygote */
	struct sbx_cg_tally *tally;	 /* shared with runs: removed runs' kills, a spare */
} sbx_cgroup;

/* What a memory-limited run's claim opens of its init, kept across the
 * init's runs (reuse), so a reused run's claim, idle and OOM count are a
 * pread or pwrite each, not a pid lookup and an open: an open /proc file
 * stays bound to its process, and pread at 0 reads a seq file afresh.
 * All of fd[] are open (fd[0] >= 0), or none (-1). */
enum { SBX_HELD_SCORE, SBX_HELD_KIDS, SBX_HELD_OOM, SBX_HELD_N };
struct sbx_init_held {
	int fd[SBX_HELD_N]; /* init's oom_score_adj, its task/<pid>/children, and
			     * the run cgroup's memory.events / memory.oom_control */
};
void sbx_init_held_none(struct sbx_init_held *h);
void sbx_init_held_close(struct sbx_init_held *h);

/* One run's own memory cgroup, <session memory dir>/run-<n>, in a session
 * with a memory ceiling (version 0 otherwise). */
typedef struct sbx_run_cgroup {
	int version; /* 0: none, 1 or 2 */
	char dir[PATH_MAX];
	char oom_path[PATH_MAX];    /* its memory.events / memory.oom_control */
	int64_t oom_base;	    /* its oom_kill count when made */
	struct sbx_cg_tally *tally; /* the session's, shared */
	uint32_t seq;		    /* its name: run-<seq> */
	bool ready;		    /* a given-back init's: its workload said "r" (no "w" comes) */
	struct sbx_init_held held;  /* from its first claim on */
} sbx_run_cgroup;

const char *sbx_cgroup_default_root(void);
/* Any limit set? */
bool sbx_cgroup_wanted(const sbx_cgroup_limits *lim);
/* Make <root>/.../sbx/<id> with the limits (nothing when none is set).
 * BackendUnavailable says what the machine lacks. */
int sbx_cgroup_create(sbx_cgroup *cg, const char *root, const char *id,
		      const sbx_cgroup_limits *lim, sbx_err *err);
/* Move pid (a host pid) into every controller's cgroup. */
int sbx_cgroup_attach(const sbx_cgroup *cg, pid_t pid, sbx_err *err);
/* The "oom_kill N" counter of memory.events / memory.oom_control text. */
int64_t sbx_cgroup_parse_oom_kills(const char *text);
int64_t sbx_cgroup_oom_kills(const sbx_cgroup *cg);
/* The oom_kill count in the memory.events / memory.oom_control file at path,
 * or -1. */
int64_t sbx_cgroup_read_oom_kills(const char *path);
int64_t sbx_cgroup_cpu_usage_us(const sbx_cgroup *cg);
/* A device rule "c MAJ:MIN rwm" (MIN may be "*": minor -1), parsed. */
struct sbx_devrule_view {
	int type; /* BPF_DEVCG_DEV_CHAR / _BLOCK */
	int major;
	int minor;
	int access; /* BPF_DEVCG_ACC_* bits */
};
int sbx_devbpf_parse(const char *text, struct sbx_devrule_view *out);
/* cgroup v2 (devbpf.c): attach a BPF_CGROUP_DEVICE program allowing
 * exactly rules[0..n) to cgroup_dir; everything else is denied. */
int sbx_devbpf_attach(const char *cgroup_dir, const char *const *rules, size_t n, sbx_err *err);

/* Kill what is left, remove the dirs (the runs' first).  Safe on an
 * empty cgroup. */
int sbx_cgroup_destroy(sbx_cgroup *cg, sbx_err *err);

/* For a session with a memory ceiling (nothing otherwise: rc->version 0):
 * make (or take the spare) run cgroup for the warm init behind pidfd (v2:
 * with memory.oom.group 1) and move the init alone into it; call before
 * the init forks its workload (it waits for the host's "P").  -1 with err
 * and errno (ESRCH: the init died; take another). */
int sbx_cgroup_run_place(const sbx_cgroup *cg, int pidfd, sbx_run_cgroup *rc, sbx_err *err);
/* The placed run is taken: oom_score_adj 1000 for its init and the
 * workload init forked (the OOM killer's first choice; idle runs have
 * 500).  The first claim opens rc->held.  -1 with errno ESRCH when init
 * is gone.  0 on version 0. */
int sbx_cgroup_run_claim(sbx_run_cgroup *rc, int pidfd);
/* The run's own oom_kill count, or -1. */
int64_t sbx_cgroup_run_oom_kills(const sbx_run_cgroup *rc);
/* Init reuse at a memory ceiling: an init whose run ended
 * cleanly keeps its run cgroup (only it is left in there: its PID
 * namespace is empty) and goes back to the session with rc's seq and
 * held files.  idle: its init's OOM score back to an idle run's (500).
 * release: rc let go of (its copy of the held files closed), the cgroup
 * left as it is.  adopt: rc again for the session's next run of that
 * init (taking *held's files), its OOM counter read now.  drop: an idle
 * init let go, its cgroup emptied and removed (or kept as the spare). */
void sbx_cgroup_run_idle(const sbx_run_cgroup *rc);
void sbx_cgroup_run_release(sbx_run_cgroup *rc);
void sbx_cgroup_run_adopt(const sbx_cgroup *cg, uint32_t seq, struct sbx_init_held *held,
			  sbx_run_cgroup *rc);
void sbx_cgroup_run_drop(const sbx_cgroup *cg, uint32_t seq);
/* SIGKILL every process of the run (v2: cgroup.kill; else pid by pid
 * until the list is empty, a bounded number of passes); how many were
 * still listed at the last pass (0: empty). */
int sbx_cgroup_run_kill(const sbx_run_cgroup *rc);
/* The run has ended: SIGKILL what is still listed in its cgroup; keep the
 * cgroup for the session's next run when it was empty and no other is
 * kept, else remove it (killing and retrying briefly while it drains), its
 * kills added to the session's count (v1).  -1 when it would
 * not go (the session's destroy tries again).  Safe on version 0. */
int sbx_cgroup_run_remove(sbx_run_cgroup *rc);
/* A memory-limited session's placer (placer.c): a thread that reads the
 * zygote's offers from ctl_fd, puts each init in a run cgroup of its own
 * and says "P" to it, and passes the offer on as a struct sbx_placed (with
 * the offer's two fds) to sbx_placer_recv. */
typedef struct sbx_placer sbx_placer;
struct sbx_placed {
	struct sbx_proto_offer off;
	int32_t place_errno; /* 0: placed in rc (ESRCH: the init died) */
	char msg[256];	     /* why not */
	sbx_run_cgroup rc;   /* owned by whoever receives it */
};
sbx_placer *sbx_placer_start(int ctl_fd, const sbx_cgroup *cg, sbx_err *err);
/* Readable when a placed offer (or the end: EOF) is there. */
int sbx_placer_fd(const sbx_placer *p);
/* One placed offer, as sbx_proto_recv_fds returns it (0: the zygote is
 * gone). */
ssize_t sbx_placer_recv(sbx_placer *p, struct sbx_placed *pl, int fds[2], size_t *nfds);
/* End the thread; what it placed and nobody took is let go.  NULL: no-op. */
void sbx_placer_stop(sbx_placer *p);
/* The session's cgroup (for run.c). */
const sbx_cgroup *sbx_session_cgroup(const sbx_session *s);

/* The session's OOM counter file (for run.c), NULL without a memory ceiling. */
const char *sbx_session_oom_path(const sbx_session *s);

/* Take the session's warm init (session.c, for run.c): its request socket
 * and pidfd become the caller's.  A given-back init that is ready comes
 * first; otherwise the zygote's offer, and the zygote is asked
 * for the next (of the same mode: the next run most likely wants what
 * this one did).  With a memory ceiling the offer comes placed: *rc is
 * its run cgroup, the caller's (version 0: none, or backends none and
 * bubblewrap, whose init the caller places).  Returns 0, or -1 with err
 * (SessionClosed when the zygote is gone; ESRCH: the init died before it
 * was placed, take another). */
int sbx_session_take_warm(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc,
			  sbx_err *err);
/* The same for a run with an allow-list of its own (session_ownnet.c): an
 * init in a network namespace made for it, *listener the proxy listener
 * inside (the caller's).  Needs a session of network_mode allowlist or
 * open (else InvalidArgument). */
int sbx_session_take_own(sbx_session *s, int *sock, int *pidfd, sbx_run_cgroup *rc, int *listener,
			 sbx_err *err);
/* Backends none and bubblewrap: the host forks each run's init, which has
 * no PID namespace of its own (SBX_SIG_KILL_RUN). */
bool sbx_session_direct(const sbx_session *s);
/* The session's end by lifetime (sbx_monotonic_ms), 0: none. */
uint64_t sbx_session_expire_at_ms(const sbx_session *s);
/* A spare taken by an open of o: its lifetime from now (session.c). */
int sbx_session_adopt(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
/* Where a run gives its init back after it ended (a message of struct
 * sbx_proto_offer with the init's pidfd and request socket), or -1 when
 * the session's inits serve one run each. */
int sbx_session_reuse_fd(const sbx_session *s);
/* The message a run gives its init back with (and the init's pidfd and
 * request socket, then with a memory ceiling its held files, in
 * sbx_init_held's order): with a memory ceiling cg_seq names the run
 * cgroup the init stays in (run-<cg_seq>), 0 otherwise. */
struct sbx_back {
	struct sbx_proto_offer off;
	uint32_t cg_seq;
};

/* uid/gid maps (userns.c): 1000 -> host_uid/host_gid; with aux != 0 (host
 * side root) also 0 -> aux and 65534 -> aux + 1, uids and gids alike. */
int sbx_userns_write_maps(pid_t pid, uid_t host_uid, gid_t host_gid, uid_t aux, sbx_err *err);
/* Explain why user namespaces are unavailable, for BackendUnavailable. */
void sbx_userns_explain(int clone_errno, sbx_err *err);

/* ---- open mode (opennet.c) ---- */
typedef struct sbx_opennet {
	pid_t pid; /* the pasta process (and its pidfd), once started */
	int pidfd;
	/* While starting (starting): nft and pasta run at once (the session
	 * runs nothing before both are done), each with its own log memfd. */
	bool starting;
	pid_t nft_pid, watcher;
	int nft_fd;		 /* nft's pidfd until it has exited and been reaped */
	int watch_fd;		 /* the readiness watcher's pipe until it has spoken */
	int wait_fd;		 /* epoll over the two: what callers poll */
	int nft_log, errfd;	 /* nft's and pasta's output (memfds) */
	int userns_fd, netns_fd; /* our copies, for nft, pasta and the watcher */
	const char *nft, *pasta;
	int64_t deadline; /* monotonic ms: SBX_OPEN_NETWORK_READY_TIMEOUT_MS from begin */
} sbx_opennet;
/* Give the network namespace netns_fd (owned by the user namespace userns_fd, or -1 when the caller is
 * root in the init userns: backend "privileged") a way out: nftables rules inside it that reject the
 * deny CIDRs/addresses (NULL-terminated, e.g. "169.254.169.254", "10.0.0.0/8", "fd00:ec2::254") and every
 * address of the host's own interfaces (getifaddrs, host loopback unreachable anyway), and pasta
 * (no inbound port forwarding: -t none -u none -T none -U none; --no-map-gw so the gateway is not
 * the host; runs as the caller's euid; dies with the caller: PR_SET_PDEATHSIG), both started at
 * once: READY (the rules installed AND the interface configured) when sbx_opennet_step returns 0;
 * the caller runs nothing in the namespace before that.
 * In steps, none of which waits unless asked: sbx_opennet_begin checks the deny list and the tools and
 * starts nft and pasta (the fds are copied; 0, or -1 with err); sbx_opennet_wait_fd is readable when
 * sbx_opennet_step has something to do (-1 once done); sbx_opennet_step(timeout_ms: 0 not at all, -1
 * until done) -> 0 ready, 1 not yet, -1 with err (pasta stopped).  A deny-list entry that is not an
 * address -> InvalidArgument; missing nft/pasta or a failure -> BackendUnavailable saying what to
 * install/fix. */
void sbx_opennet_init(sbx_opennet *on);
int sbx_opennet_begin(sbx_opennet *on, int userns_fd, int netns_fd, const char *const *deny,
		      sbx_err *err);
int sbx_opennet_wait_fd(const sbx_opennet *on);
int sbx_opennet_step(sbx_opennet *on, int timeout_ms, sbx_err *err);
/* begin + step until done: ready when it returns 0. */
int sbx_opennet_start(sbx_opennet *on, int userns_fd, int netns_fd, const char *const *deny,
		      sbx_err *err);
/* Kill pasta (and nft or the watcher while starting) and reap them.  Safe on an initialized one. */
void sbx_opennet_stop(sbx_opennet *on);
/* The same, but pasta, killed, is reaped by a thread (sbx_reap_later):
 * its exit tears down its tap device, ~35 ms here (session close). */
void sbx_opennet_stop_nowait(sbx_opennet *on);

/* Reap a child already killed from a detached thread (reaper.c), so the
 * caller does not wait out its exit; blocking when no thread can start. */
void sbx_reap_later(pid_t pid);
/* Run fn(arg) on the reaper's thread, after the jobs queued before it:
 * 0, or -1 when it cannot (no thread, or the process is exiting): the
 * caller runs it itself.  Drain waits up to timeout_ms for the queue to
 * empty; at exit it is waited for up to SBX_REAP_EXIT_WAIT_MS. */
#define SBX_REAP_EXIT_WAIT_MS 10000
int sbx_reap_job(void (*fn)(void *), void *arg);
void sbx_reap_drain(int timeout_ms);

/* ---- the zygote's setup, packed for the template (zygote_exec.c) ---- */

/* What a zygote sets itself up from (backend_zygote.c fills it in the
 * host; it crosses to the template packed, zygote_exec.c). */
struct sbx_zygote_spawn {
	struct sbx_zygote_cfg cfg; /* ctl_fd and the rest; the zygote adds
				    * its netns fds, oom_fd and oom_adj */
	const sbx_rootfs *fs;	   /* the root to build */
	const char *hostname;
	const char *hold_fifo;	/* tests only (SBX_TEST_HOLD_OPEN_FIFO), or NULL */
	bool hold_root;		/* ... held before the root, not at the start */
	int sync_fd;		/* read: one byte once the id maps are written */
	int procs[SBX_CG_NCTL]; /* cgroup.procs files to join, or -1 */
	uid_t zid;		/* userns: the zygote's own uid and gid inside */
	bool privileged;	/* no user namespace: stay host root */
	bool oom;		/* the session has a memory ceiling */
	sbx_net net_mode;	/* the widest network mode it prepares */
	uint16_t proxy_port;
};

#endif
