/*
 * sbx.h: the public C API of libsbx, the sandbox core.
 *
 * libsbx opens sessions (a long-lived "zygote" process already inside the
 * session's user, mount, PID, network, IPC, UTS and cgroup namespaces) and
 * starts runs in them (each run is a fresh PID + mount namespace whose PID 1
 * is sbx-init).  Everything that can fail fills an sbx_err that says what
 * failed, why and, where it can, how to fix it.  No function exits the
 * calling process; only the short-lived children between clone() and
 * execve() may die, after reporting why to their parent.
 *
 * Ownership: every pointer returned by sbx_session_open or sbx_run_start is
 * owned by the caller and released with sbx_session_close or sbx_run_free.  Strings passed
 * in options are copied when the callee needs them beyond the call.
 */
#ifndef SBX_H
#define SBX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SBX_VERSION "0.1.0"

/* The path the session's work dir has inside every run. */
#define SBX_SANDBOX_WORKDIR "/tmp/sandbox-work"
/* Where a session with extra trusted CAs (ca_certs) finds its bundle. */
#define SBX_CA_BUNDLE_PATH "/etc/sbx/ca-certificates.crt"
/* The uid/gid the workload runs as inside the sandbox. */
#define SBX_SANDBOX_UID 1000
#define SBX_SANDBOX_GID 1000
/* Host uid the sandbox user maps to when the host side runs as root. */
#define SBX_DEFAULT_HOST_UID 231072
/* Backend userns as root: inside 0 (root, sbx-init) and 65534 (nobody) map
 * to host ids aux and aux + 1 (uid and gid alike); this is the default aux. */
#define SBX_DEFAULT_AUX_UID 231073
/* At a session's end by lifetime: SIGTERM to every run, SIGKILL after this
 * (the reference product's 10 s). */
#define SBX_DEFAULT_EXPIRE_GRACE_MS 10000

/* Error kinds, named as the Lua API names them. */
typedef enum sbx_err_kind {
	SBX_E_NONE = 0,
	SBX_E_INVALID_ARGUMENT,	   /* caller passed something wrong */
	SBX_E_BACKEND_UNAVAILABLE, /* the machine cannot provide the backend */
	SBX_E_EXECUTION,	   /* the sandbox misbehaved (spawn, stream) */
	SBX_E_SESSION_CLOSED,	   /* the session is gone */
	SBX_E_POLICY_DENIED,	   /* the policy refused */
} sbx_err_kind;

typedef struct sbx_err {
	sbx_err_kind kind;
	int sys_errno; /* errno of the failing call, 0 if none */
	char msg[512]; /* human-readable: what failed, why, how to fix */
} sbx_err;

/* Fill err (may be NULL) and return -1, so callers can `return sbx_err_set(...)`. */
int sbx_err_set(sbx_err *err, sbx_err_kind kind, int sys_errno, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Name of a kind as the Lua API spells it ("InvalidArgument", ...). */
const char *sbx_err_kind_name(sbx_err_kind kind);

/* A read-only or read-write bind of a host path at the same path inside. */
typedef struct sbx_bind {
	const char *path;
	bool writable;
} sbx_bind;

/* A run's network: every mode but the host's own is a network namespace
 * the sandbox cannot leave (netns.c). */
typedef enum sbx_net {
	SBX_NET_BLOCKED = 0, /* only lo */
	SBX_NET_ALLOWLIST,   /* only lo, plus the proxy listener 127.0.0.1:proxy_port */
	SBX_NET_OPEN,	     /* out through pasta, deny-list rejected by nftables inside */
	SBX_NET_NMODES,
} sbx_net;

typedef struct sbx_session_opts {
	const char *backend;   /* "userns", "privileged" (root), "bubblewrap" or "none" */
	const char *work_dir;  /* pinned host work dir, or NULL for a fresh one */
	const char *state_dir; /* where fresh work dirs live; NULL: default */
	const char *const
		*system_ro; /* host dirs bound read-only at the same path (NULL-terminated) */
	const char *const *etc_files; /* entries of /etc bound read-only (NULL-terminated names) */
	const sbx_bind *binds;	      /* extra binds requested by the session */
	size_t n_binds;
	const char *const *seccomp_deny;  /* extra syscall names to refuse (NULL-terminated) */
	const char *const *seccomp_allow; /* widenable syscall names to allow (NULL-terminated) */
	uid_t host_uid;			  /* host uid of the sandbox user when root; 0: default */
	uid_t aux_uid;			  /* userns as root: host ids of inside 0 and 65534 are
	                             * aux_uid, aux_uid + 1; 0: SBX_DEFAULT_AUX_UID */
	uint64_t tmp_bytes;		  /* size cap of the per-run /tmp; 0: default 256 MiB */
	uint64_t shm_bytes;		  /* size cap of the per-run /dev/shm; 0: default 64 MiB */
	const char *hostname;		  /* UTS hostname; NULL: "sandbox" */
	const char *ca_bundle;	  /* PEM the runs trust, at SBX_CA_BUNDLE_PATH; NULL: none */
	uint64_t lifetime_ms;	  /* session ends by itself after this; 0: never */
	uint32_t expire_grace_ms; /* at its end: SIGTERM to every run, SIGKILL this
				   * much later; 0: SBX_DEFAULT_EXPIRE_GRACE_MS */
	/* Resource ceilings (cgroup.c; need root or a delegated cgroup). */
	uint64_t memory_bytes;	 /* memory incl. tmpfs pages, swap off; 0: none */
	uint32_t cpu_milli;	 /* CPU time in thousandths of a CPU; 0: none */
	uint32_t pids_max;	 /* processes + threads at once; 0: none */
	uint64_t disk_bytes;	 /* work dir cap (a tmpfs of that size, root only); 0: none */
	const char *cgroup_root; /* NULL: $SBX_CGROUP_ROOT or /sys/fs/cgroup */
	/* rlimits of every workload (second layer); 0: the defaults below. */
	uint64_t nofile;      /* RLIMIT_NOFILE; default 1024 */
	uint64_t fsize_bytes; /* RLIMIT_FSIZE; default: unlimited */
	/* Backend "privileged": host uid/gid of the workload; 0: default. */
	uid_t run_uid;
	/* GPUs (gpu.c; backend "privileged" only). */
	uint32_t gpus;		      /* how many; 0: none visible */
	const char *gpu_dev_dir;      /* where the nvidia* nodes are; NULL: /dev */
	const char *const *gpu_paths; /* driver files bound read-only (NULL-terminated) */
	bool gpu_shared;	      /* may share a GPU with another session */
	/* Warm runs the zygote keeps offered ahead of time (each an idle
	 * init + workload); more serve concurrent starts without waiting.
	 * 0: 1; at most SBX_MAX_WARM_RUNS. */
	uint32_t warm_runs;
	/* A warm run (offered or given back) that has had no request for this
	 * long ends, so an idle session keeps only its zygote; the next run
	 * then waits for a fresh one.  0: SBX_WARM_IDLE_MS; UINT32_MAX: never. */
	uint32_t warm_idle_ms;
	/* Network: the widest mode a run of this session may ask for (each
	 * mode up to it gets a namespace of its own, made once). */
	sbx_net network_mode;
	uint16_t proxy_port; /* allowlist: the listener's port inside; 0: 3128 */
	/* open: addresses and CIDRs rejected inside the namespace
	 * (NULL-terminated), on top of the host's own addresses. */
	const char *const *open_deny;
} sbx_session_opts;

#define SBX_MAX_WARM_RUNS 64
#define SBX_WARM_IDLE_MS 10000

typedef struct sbx_session sbx_session;

/*
 * Open a session: prepare the work dir, clone the zygote into fresh
 * namespaces, build its root filesystem, wait until it is ready.
 * Returns NULL and fills err on failure (BackendUnavailable when the machine
 * lacks what the backend needs, with how to fix it).
 */
sbx_session *sbx_session_open(const sbx_session_opts *opts, sbx_err *err);
/*
 * sbx_session_open in two steps, for a host with an event loop (sbxd) that
 * must not wait SBX_SESSION_READY_TIMEOUT_MS for the sandbox to set up:
 *
 *   sbx_session_start   everything up to the zygote's setup, which goes on
 *                       in the background; returns the session (owned by the
 *                       caller, not usable for runs until finished) or NULL
 *                       with err.  Backends without a zygote come back
 *                       finished.
 *   sbx_session_ready_fd  an fd (owned by the session) that becomes readable
 *                       when sbx_session_finish will not wait; -1 once
 *                       finished.
 *   sbx_session_finish  read the sandbox's ready message, waiting up to
 *                       timeout_ms (0: not at all); for network_mode "open"
 *                       then connect its network (nft, pasta), waiting up
 *                       to timeout_ms more (-1: until pasta's own deadline,
 *                       SBX_OPEN_NETWORK_READY_TIMEOUT_MS).  Returns 0 (ready),
 *                       1 (not yet: call again), or -1 with err (the setup
 *                       failed).  On 1 and -1 the session is still the
 *                       caller's, who closes it with sbx_session_close when
 *                       it gives up (its own deadline, or the failure).
 */
#define SBX_SESSION_READY_TIMEOUT_MS 10000
/* network_mode "open": how long more, after that, nft and pasta may take to
 * connect the sandbox (sbx_session_finish goes on waiting for them then). */
#define SBX_OPEN_NETWORK_READY_TIMEOUT_MS 12000
sbx_session *sbx_session_start(const sbx_session_opts *opts, sbx_err *err);
int sbx_session_ready_fd(const sbx_session *s);
int sbx_session_finish(sbx_session *s, int timeout_ms, sbx_err *err);
/*
 * An fd (owned by the session) that is readable when the zygote has a warm
 * run on offer (with a memory ceiling: once the session's placer thread
 * has put it in its run cgroup), so that the next sbx_run_start finds one
 * without waiting;
 * -1 when there is nothing to wait for (backends without a zygote, a
 * warm run of this mode already set aside, or whatever take will find
 * already there).  Never waits: offers already there that expired unused
 * (sbx_session_opts.warm_idle_ms), or that a taken spare made before its
 * take, are dropped first, and a live one is set aside, so the fd is one
 * to wait on.  Once it is readable, ask again: what came may have been one
 * of those.
 */
int sbx_session_offer_fd(sbx_session *s, sbx_net mode);
/* The same for a run with its own allow-list (sbx_run_opts.own_netns):
 * asks the zygote for an init in a namespace of its own unless one is
 * ready or asked for; -1 when there is nothing to wait for (one is ready,
 * or what take will find is already there). */
int sbx_session_own_offer_fd(sbx_session *s);
/* End every process of the session, remove what it created (not a pinned
 * work dir), free it.  Safe on NULL.  Returns 0, or -1 with err filled when
 * cleanup could not remove something (it still frees the session). */
int sbx_session_close(sbx_session *s, sbx_err *err);
/*
 * Spare sessions (spare.c): up to n sessions of one shape, opened ahead of
 * time by a thread of libsbx, so that an open of that shape skips building
 * namespaces and a root.  Off until sbx_spares_keep asks for some.
 *
 *   sbx_spares_keep   keep n (0: none) spares of o's shape made under tag
 *                     (the caller's name for its policy: a different shape
 *                     or tag closes every spare first).  0, or -1 with err
 *                     (InvalidArgument for a shape never pooled: a pinned
 *                     work_dir, GPUs, disk_bytes, backends none/bubblewrap).
 *   sbx_spares_take   a spare of exactly o's shape and tag (o's lifetime_ms
 *                     counts from now), or NULL: open cold.  A spare is
 *                     handed out once; a dead one never.
 *   sbx_spares_flush  close every spare and forget the shape (a policy
 *                     reload: no spare of an old policy is handed out).
 * Spares are closed at exit (atexit).
 */
#define SBX_SPARES_MAX 64
typedef struct sbx_spares_stats {
	unsigned want, ready;
	bool making;	  /* the thread is opening one now */
	uint64_t made;	  /* opened and put in the pool */
	uint64_t taken;	  /* handed to an open */
	uint64_t missed;  /* opens of the pool's shape that found none ready */
	uint64_t dead;	  /* found dead at a take, closed */
	uint64_t failed;  /* the thread's opens that failed */
	uint64_t flushed; /* closed by a flush */
	char last_error[256];
} sbx_spares_stats;
int sbx_spares_keep(const sbx_session_opts *o, unsigned n, const char *tag, sbx_err *err);
/* The same, but a new shape replaces the pool's only when asked for twice
 * in a row (sbxd's --spare-sessions, which follows the last open). */
int sbx_spares_follow(const sbx_session_opts *o, unsigned n, const char *tag, sbx_err *err);
sbx_session *sbx_spares_take(const sbx_session_opts *o, const char *tag, sbx_err *err);
void sbx_spares_flush(void);
void sbx_spares_get_stats(sbx_spares_stats *st);
/* Whether o's shape may be pooled (*why: why not, when not). */
bool sbx_spares_poolable(const sbx_session_opts *o, const char **why);

/* The host path of the work dir (owned by the session). */
const char *sbx_session_work_dir(const sbx_session *s);
/* An O_PATH|O_DIRECTORY fd on the work dir, owned by the session. */
int sbx_session_work_dir_fd(const sbx_session *s);
/* Host uid/gid that own files the sandbox writes in its work dir (a
 * pinned dir's own owner when root idmapped it to the sandbox). */
uid_t sbx_session_host_uid(const sbx_session *s);
gid_t sbx_session_host_gid(const sbx_session *s);
/* The session's id: 32 hex chars (128 random bits), owned by the session. */
const char *sbx_session_id(const sbx_session *s);
/* true while the session can run: false from its lifetime's end on (its
 * runs then get SIGTERM, and SIGKILL after expire_grace_ms), or once its
 * zygote died. */
bool sbx_session_alive(sbx_session *s);
/* The backend the session runs on ("userns", "privileged", "none", ...). */
const char *sbx_session_backend(const sbx_session *s);
/* CPU time used by the session's cgroup, in microseconds; -1 without one. */
int64_t sbx_session_cpu_usage_us(const sbx_session *s);
/* OOM kills in the session's cgroup since it opened; -1 without a memory ceiling. */
int64_t sbx_session_oom_kills(const sbx_session *s);
/* The session's network ceiling. */
sbx_net sbx_session_network_mode(const sbx_session *s);
/* allowlist: a new fd (the caller's, CLOEXEC) of the listening socket inside
 * the session's allowlist namespace, for the proxy to serve; -1 with err
 * when the session has none. */
int sbx_session_proxy_listener(const sbx_session *s, sbx_err *err);
/* Device nodes (inside paths) bound for the session's GPUs, NULL-terminated. */
const char *const *sbx_session_gpu_nodes(const sbx_session *s);
/*
 * Server-only: keep the calling process out of the OOM killer's reach
 * (oom_score_adj -1000).  sbxd calls it once at start; a library host such
 * as sbxlua does not.  Returns 0 or -1 with err.
 */
int sbx_protect_from_oom(sbx_err *err);

/* How a run's stdio stream is connected. */
typedef enum sbx_io {
	SBX_IO_PIPE = 0, /* a pipe the caller reads (or writes, for stdin) */
	SBX_IO_NULL,	 /* /dev/null */
	SBX_IO_INHERIT,	 /* the caller's own fd 0/1/2 */
} sbx_io;

typedef struct sbx_run_opts {
	const char *const *argv; /* NULL-terminated, argv[0] resolved with PATH inside */
	const char *const *envp; /* NULL-terminated "K=V": the whole environment */
	const char *cwd;	 /* inside path, already validated; NULL: the work dir */
	sbx_io stdin_mode, stdout_mode, stderr_mode;
	const char *stdin_data; /* bytes fed to a PIPE stdin, then closed */
	size_t stdin_len;
	uint32_t timeout_ms;  /* 0: none */
	uint32_t grace_ms;    /* SIGTERM to SIGKILL; 0: default 2000 */
	sbx_net network_mode; /* at most the session's */
	/* A PIPE stdin that stays open after stdin_data: the caller writes
	 * it with sbx_run_write and ends it with sbx_run_close_stdin. */
	bool stdin_live;
	/* Both non-zero: the command gets a pseudo-terminal of this size as
	 * its controlling terminal and stdio, made in the run's own devpts
	 * (never the host's; backends none and bubblewrap refuse it with
	 * BackendUnavailable).  The stdio modes are then ignored: the
	 * terminal's output comes as SBX_EV_STDOUT, stdin is live. */
	uint16_t pty_rows, pty_cols;
	/* network_mode SBX_NET_ALLOWLIST in a network namespace of the run's
	 * own, not the session's shared one: the run's init is cloned into a
	 * namespace made for it, holding only lo and a proxy listener of its
	 * own (sbx_run_take_listener), which the caller serves with the run's
	 * allow-list.  No other run can reach that listener, nor this run the
	 * session's. */
	bool own_netns;
} sbx_run_opts;

typedef struct sbx_run sbx_run;

/* Why a run ended. */
typedef enum sbx_term {
	SBX_TERM_NONE = 0, /* still running */
	SBX_TERM_EXIT,	   /* exited by itself (any code) */
	SBX_TERM_SIGNAL,   /* killed by a signal it did not get from us */
	SBX_TERM_TIMEOUT,  /* timeout_ms passed: SIGTERM, then SIGKILL */
	SBX_TERM_KILLED,   /* sbx_run_kill() or session close */
	SBX_TERM_ERROR,	   /* the sandbox failed to start or lost the run */
	SBX_TERM_OOM,	   /* the session's memory ceiling: the OOM killer ended it */
	SBX_TERM_EXPIRED,  /* the session's lifetime passed: SIGTERM, grace, SIGKILL */
} sbx_term;

/* The name of a termination reason, as Lua and the remote API spell it
 * ("running", "exit", "signal", "timeout", "killed", "error", "oom",
 * "session_expired"). */
const char *sbx_term_name(sbx_term t);

typedef struct sbx_run_result {
	sbx_term term;
	int returncode; /* exit code; -signo for signal deaths; -1 on error */
	int signo;	/* signal that ended it, 0 if none */
	uint64_t runtime_ms;
	char error[256]; /* SBX_TERM_ERROR: why */
	/* SBX_TERM_ERROR: SBX_E_INVALID_ARGUMENT when the request's option
	 * error_option was wrong (error then starts with "<option> "), else
	 * SBX_E_EXECUTION.  Callers branch on these, never on error's text. */
	sbx_err_kind error_kind;
	char error_option[16];
} sbx_run_result;

/* One thing sbx_run_next() can return. */
typedef enum sbx_event_type {
	SBX_EV_NONE = 0, /* nothing within the timeout */
	SBX_EV_STDOUT,
	SBX_EV_STDERR,
	SBX_EV_EXIT, /* the run ended and both streams are drained */
} sbx_event_type;

typedef struct sbx_event {
	sbx_event_type type;
	const char *data; /* STDOUT/STDERR: valid until the next call */
	size_t len;
} sbx_event;

/* Start a run in the session.  Returns NULL and fills err on failure. */
sbx_run *sbx_run_start(sbx_session *s, const sbx_run_opts *opts, sbx_err *err);
/*
 * Wait up to timeout_ms (-1: forever) for the next event.  want_stdout /
 * want_stderr say which pipes to read now: a stream not wanted is not read,
 * so the process blocks on it once the pipe is full (that is the
 * backpressure).  EXIT is returned once, after every wanted-or-not stream
 * has reached EOF; after it, result is final.  Returns 0 or -1 with err.
 */
int sbx_run_next(sbx_run *r, int timeout_ms, bool want_stdout, bool want_stderr, sbx_event *ev,
		 sbx_err *err);
/*
 * Read up to cap bytes of stdout (which 1) or stderr (2) into the caller's
 * buf without waiting and without an event: for a caller with its own
 * loop that wants the bytes where it sends them from (sbxd).  Returns the
 * count, or 0 when there is nothing now, the stream ended, or the run has
 * a pty: sbx_run_next then reads, sees the end and reports it as usual.
 */
size_t sbx_run_read_output(sbx_run *r, int which, void *buf, size_t cap);
/* Send a signal to the run (SIGKILL ends everything in it).  On a pty
 * run SIGINT, SIGQUIT and SIGTSTP go to the terminal's foreground process
 * group, as the keys ^C, ^\ and ^Z would send them. */
int sbx_run_kill(sbx_run *r, int signo, sbx_err *err);
/*
 * Live stdin (stdin_live, or a pty: writes go to the terminal): write what
 * the pipe or terminal takes now, without blocking; *written says how much
 * (0 when it is full: sbx_run_next then also returns SBX_EV_NONE as soon
 * as it has room, so a caller's loop can write again).  Returns 0, or -1
 * with err (InvalidArgument: no live stdin or already closed; EPIPE: the
 * command closed its end).  Bytes of stdin_data still being fed go first.
 */
int sbx_run_write(sbx_run *r, const void *data, size_t len, size_t *written, sbx_err *err);
/* End live stdin: close the pipe (the command reads EOF); on a pty, type
 * the terminal's EOF character (^D) instead.  0, or -1 with err. */
int sbx_run_close_stdin(sbx_run *r, sbx_err *err);
/* A pty run: set the window size (SIGWINCH to the foreground process
 * group).  InvalidArgument without a pty.  0, or -1 with err. */
int sbx_run_resize(sbx_run *r, uint16_t rows, uint16_t cols, sbx_err *err);
/* Whether the run has a pty. */
bool sbx_run_has_pty(const sbx_run *r);
/* The live stdin fd (-1 without one), for callers with their own loop. */
int sbx_run_stdin_fd(const sbx_run *r);
/* The result so far (term == SBX_TERM_NONE while running). */
const sbx_run_result *sbx_run_result_get(const sbx_run *r);
/* fds for callers with their own event loop (-1 once closed). */
int sbx_run_stdout_fd(const sbx_run *r);
int sbx_run_stderr_fd(const sbx_run *r);
int sbx_run_status_fd(const sbx_run *r);
int sbx_run_pidfd(const sbx_run *r);
/* own_netns: the proxy listener of the run's namespace, the caller's from
 * now on (-1 once taken, or without own_netns).  Until someone serves it,
 * the run's connections to the proxy wait in its backlog. */
int sbx_run_take_listener(sbx_run *r);
/* Kill the run if it is still going, close its fds, free it.  Safe on NULL. */
void sbx_run_free(sbx_run *r);

/* ---- files beneath the work dir (files.c) ---- */

/*
 * Check a caller-supplied relative path: non-empty, not absolute, no NUL
 * (len says how long it really is), no "..", no component longer than
 * NAME_MAX, total under PATH_MAX.  Returns 0 or -1 with InvalidArgument.
 */
int sbx_path_check(const char *path, size_t len, sbx_err *err);
/*
 * Write data to path beneath dirfd atomically (temp file + rename), creating
 * missing parent directories, files owned by uid/gid (when the caller may
 * chown) with mode 0644.  Resolution uses openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): no symlink leads out.
 * len > max_bytes is InvalidArgument.  Returns 0 or -1 with err.
 */
int sbx_file_put(int dirfd, const char *path, size_t path_len, const void *data, size_t len,
		 size_t max_bytes, uid_t uid, gid_t gid, sbx_err *err);
/*
 * Read the regular file at path beneath dirfd (same resolution rules; FIFOs,
 * devices, sockets and directories refused without blocking).  A file larger
 * than max_bytes is InvalidArgument.  On success *out is malloc'd (caller
 * frees) and *out_len set.  Returns 0 or -1 with err.
 */
int sbx_file_get(int dirfd, const char *path, size_t path_len, size_t max_bytes, char **out,
		 size_t *out_len, sbx_err *err);
/*
 * Open the regular file at path beneath dirfd for reading, as sbx_file_get
 * would read it: the fd (the caller's, CLOEXEC) and its size, for callers
 * that stream it rather than hold it.  Over max_bytes: InvalidArgument.
 * Returns the fd, or -1 with err.
 */
int sbx_file_open(int dirfd, const char *path, size_t path_len, size_t max_bytes, uint64_t *size,
		  sbx_err *err);

/* ---- seccomp and capabilities (seccomp.c, caps.c) ---- */

struct sock_fprog;
/* One syscall of the effective profile (sbx_seccomp_profile). */
typedef enum { SBX_SC_ALLOWED, SBX_SC_ARGS, SBX_SC_REFUSED } sbx_sc_action;
typedef struct sbx_seccomp_entry {
	const char *name;     /* static */
	int nr;		      /* this architecture's number */
	sbx_sc_action action; /* ARGS: allowed unless rule says otherwise */
	int err;	      /* REFUSED: the errno the workload gets */
	const char *rule;     /* ARGS: what is refused, in words (static) */
	bool widenable;	      /* a policy's allow list may allow it */
} sbx_seccomp_entry;
/*
 * The effective syscall profile for this architecture: the compiled floor
 * (seccomp_profile.h) narrowed by deny and widened by allow (names of the
 * widenable set only), one entry per syscall of this architecture's table,
 * by number; any number not listed fails with ENOSYS.  A deny name unknown
 * to every architecture, an allow name not widenable, or an architecture
 * without a table is an error.  Returns a malloc'd array (free()), or NULL.
 */
sbx_seccomp_entry *sbx_seccomp_profile(const char *const *deny, const char *const *allow, size_t *n,
				       sbx_err *err);
/* The architecture name of this build's syscall table, or NULL (no table:
 * every session is refused). */
const char *sbx_seccomp_arch(void);
/* Every name of the compiled profile is in this architecture's table and
 * in one list only (for the unit test).  0, or -1 with err. */
int sbx_seccomp_selfcheck(sbx_err *err);
/*
 * Compile that profile into a BPF program: the architecture checked and
 * other ABIs (i386, x32) killed, everything not allowed refused.  The
 * returned program is malloc'd; free with sbx_seccomp_free.
 */
struct sock_fprog *sbx_seccomp_compile(const char *const *deny, const char *const *allow,
				       sbx_err *err);
/* The same, and with no_setid chmod/fchmod/fchmodat/fchmodat2, creat, and
 * open/openat/mknod/mknodat that create refuse a setuid or setgid bit
 * (EPERM), openat2 answers ENOSYS: sessions with an idmapped bind (idmap.c). */
struct sock_fprog *sbx_seccomp_compile_setid(const char *const *deny, const char *const *allow,
					     bool no_setid, sbx_err *err);
/*
 * The same filter in two stages, for an sbx-init that serves run after run
 * (init.c): the init stage is the whole filter with what init itself needs
 * allowed (the mount calls of its scratch reset, and every call the deny
 * list narrowed), installed once in init; the run stage refuses exactly
 * those as the whole filter does and allows the rest, installed by each
 * workload on top.  The kernel applies both, so a workload gets the whole
 * filter's answer for every call, while its own install is a few
 * instructions instead of the whole filter's JIT and cache.  Both travel in
 * the allocation sbx_seccomp_compile* returns: sbx_seccomp_stage(prog,
 * SBX_SC_STAGE_INIT or SBX_SC_STAGE_RUN) gives one, or NULL (prog has none).
 */
enum { SBX_SC_WHOLE, SBX_SC_STAGE_INIT, SBX_SC_STAGE_RUN, SBX_SC_NSTAGES };
const struct sock_fprog *sbx_seccomp_stage(const struct sock_fprog *prog, int stage);
void sbx_seccomp_free(struct sock_fprog *prog);
/* Install prog on the calling thread (no_new_privs must be set).  Child-side. */
int sbx_seccomp_install(const struct sock_fprog *prog, sbx_err *err);
/*
 * Drop every capability (bounding, ambient, inheritable, permitted,
 * effective) and lock the securebits so none can come back through exec or
 * uid 0.  Child-side; call after the last privileged step.
 */
int sbx_caps_drop_all(sbx_err *err);
/*
 * Only lock the securebits and empty the bounding set, keeping the
 * effective set: the zygote does this once so that each run's
 * sbx_caps_drop_all has less to change (each drop is a credential change).
 */
int sbx_caps_drop_bounding(sbx_err *err);

#endif
