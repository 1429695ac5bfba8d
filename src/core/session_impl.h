/*
 * session_impl.h: a session's private state, shared by the files that make
 * up a session: session.c (lifecycle, warm pool), statedir.c (its dir under
 * the state dir), backend_zygote.c (userns, privileged: the zygote's start),
 * backend_none.c and backend_bubblewrap.c (the backends whose runs the host
 * starts itself), backend_ids.c (whose ids each backend's sessions have).  Nothing outside src/core sees it.
 */
#ifndef SBX_SESSION_IMPL_H
#define SBX_SESSION_IMPL_H

#include <limits.h>
#include <time.h>

#include "internal.h"

#define DEFAULT_NOFILE 1024
/* Backend "privileged": per-session host uids come from this range. */
#define PRIV_UID_BASE 300000u
#define PRIV_UID_SPAN 65536u
#define MAX_DIRECT 64
/* Given-back inits kept per mode: as many as runs that go at once, up to
 * this; more are let go (they end).  Each idle one holds two processes, so
 * with a pids ceiling at most 1/16 of it is spent on them. */
#define MAX_IDLE 32
#define DEFAULT_PROXY_PORT 3128

struct sbx_session {
	pid_t zygote;
	int ctl_fd;
	int work_fd;
	int lock_fd; /* flock'd while the session lives */
	uid_t host_uid;
	gid_t host_gid;
	uid_t inside_uid; /* the workload's ids in its own root (owner of its files) */
	gid_t inside_gid;
	uid_t aux_uid; /* userns as root: inside 0 and 65534 map here (userns.c); or 0 */
	bool pinned;
	/* Host ids that own what the sandbox writes in its work dir: the
	 * host ids, or a pinned dir's owner (idmapped to them, idmap.c). */
	uid_t work_uid;
	gid_t work_gid;
	int work_ns; /* bubblewrap: a pinned dir's idmap (its userns), or -1 */
	/* bubblewrap as root, pinned: where each run attaches its copy of the
	 * work dir, for bwrap to bind by a path it may walk; or "". */
	char work_stage[PATH_MAX];
	char id[33];
	char session_dir[PATH_MAX]; /* state_dir/sessions/<id>, "" when pinned */
	char work_dir[PATH_MAX];
	char backend[16];
	const struct sbx_backend *be; /* backend.c's entry */
	bool privileged;	      /* namespaces without a user namespace (root) */
	bool none;		      /* runs forked by the host itself (none, bubblewrap) */
	char **bwrap_argv;	      /* its fixed arguments, owned */
	struct sock_fprog *prog;      /* bubblewrap: the filter each bwrap loads */
	bool disk_mounted;	      /* work dir is a size-capped tmpfs of ours */
	sbx_cgroup cg;
	struct sbx_zygote_cfg direct;  /* backend "none": what its inits get */
	int direct_pidfds[MAX_DIRECT]; /* backend "none": inits to reap */
	size_t n_direct;
	sbx_gpu gpu;
	sbx_rootfs fs;	    /* the root filesystem, described once */
	sbx_net net;	    /* the network ceiling */
	int proxy_listener; /* allowlist: the listening socket inside, or -1 */
	sbx_opennet open;   /* open: the pasta that connects its namespace */
	/* A warm init of each mode that came while a run of another mode
	 * waited: kept for the next run of its mode (sock -1: none).
	 * unasked: set aside for a run of its own mode (sort_offers), which
	 * took a given-back init instead, so nothing has asked the zygote
	 * for the next offer yet (ask_for, ask_for_parked). */
	struct {
		int sock, pidfd;
		sbx_run_cgroup rc; /* with a memory ceiling: where it was placed */
		bool unasked;
	} spare[SBX_NET_NMODES];
	/* Runs with an allow-list of their own (session_ownnet.c): one init
	 * in a namespace of its own kept ready (sock -1: none), and how many
	 * the zygote was asked for and has not offered yet. */
	struct {
		int sock, pidfd;
		sbx_run_cgroup rc;
	} own_spare;
	unsigned own_pending;
	/* Offers made before a spare's take, still to come: each is let go
	 * (sbx_session_adopt). */
	unsigned stale_offers;
	/* With a memory ceiling: the thread that places each offered init in
	 * a run cgroup of its own (placer.c); offers come from it. */
	sbx_placer *placer;
	/* Reuse: runs give their init back through inbox (a socketpair; runs
	 * hold a copy of inbox[1], not a pointer to us), and take_warm keeps
	 * them in idle until they say they are ready ("r"). */
	int inbox[2];
	struct {
		int sock, pidfd;
		/* With a memory ceiling: its run cgroup, and what its claim
		 * opened (internal.h: sbx_init_held). */
		uint32_t cg_seq;
		struct sbx_init_held held;
	} idle[SBX_NET_NMODES][MAX_IDLE];
	size_t n_idle[SBX_NET_NMODES];
	size_t max_idle;
	/* The session's end by lifetime (sbx_monotonic_ms; 0: none), and the
	 * grace its runs get between SIGTERM and SIGKILL then (init.c). */
	uint64_t expire_at_ms;
	uint32_t expire_grace_ms;
	/* Between sbx_session_start and sbx_session_finish: the zygote is
	 * setting up; finish reads its ready message on ctl_fd (zygote_ready
	 * once it has), and for open mode waits for the network too. */
	bool pending, zygote_ready;
	char **open_deny; /* open: the caller's deny list, copied for finish */
};

/*
 * A backend: what differs per backend, named once (backend.c's table); to
 * change a backend, edit the file its functions live in.
 */
struct sbx_backend {
	const char *name;
	bool privileged; /* namespaces without a user namespace (root) */
	bool none;	 /* no zygote: the host forks each run's init (backend_none.c) */
	bool own_root;	 /* runs see a root of their own (rootfs.c's description) */
	bool netns;	 /* a network namespace per session: network modes besides blocked */
	bool gpus;	 /* GPUs can be bound (host root ids, cgroup device rules) */
	/* Whether it can work here (NULL: always): 0, or -1 with err saying
	 * what is missing. */
	int (*check)(const sbx_session_opts *o, sbx_err *err);
	/* The session's host ids (host_uid/gid, aux_uid) and inside ids,
	 * chosen before its dir is made (the dir is given to the host ids):
	 * 0, or -1 with err (backend_ids.c). */
	int (*ids)(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
	/* Once the session's id and dir exist (NULL: nothing to do): 0, or
	 * -1 with err. */
	int (*ids_own)(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
	/* Start the session's processes, once its dir, root description,
	 * cgroup and filter are made; it may take *prog (then sets it NULL).
	 * 0: ready; 1: setting up (sbx_session_finish waits); -1 with err
	 * (the caller closes the session). */
	int (*start)(sbx_session *s, const sbx_session_opts *o, struct sock_fprog **prog,
		     sbx_err *err);
	/* A warm init for a run of mode (no wider than the session's): 0 with
	 * *sock, *pidfd and (with a memory ceiling) *rc, or -1 with err. */
	int (*take)(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc,
		    sbx_err *err);
	/* Whether the session can still run (false once it ended). */
	bool (*alive)(sbx_session *s);
	/* At close (also of a half-made session): end the session's
	 * processes and free what start made. */
	void (*stop)(sbx_session *s);
};
/* The backend of that name, or NULL. */
const struct sbx_backend *sbx_backend_find(const char *name);

/* Whether the session's lifetime has passed (session.c). */
bool sbx_session_expired(const sbx_session *s);
/* RLIMIT_NOFILE of every run (session.c). */
uint64_t sbx_session_run_nofile(const sbx_session_opts *o);
/* session.c: the zygote's warm-init pool (userns, privileged): a given-back
 * idle init, a set-aside offer or the zygote's next offer. */
int sbx_pool_take(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc,
		  sbx_err *err);

/* session.c, for session_ownnet.c: the zygote's next offer (-1 with err;
 * -2 with err and errno when it came but cannot be used, and the caller
 * must ask for another; -3 when it was one made before a spare's take,
 * let go and another asked for: receive again; *mode is the offer's
 * whenever it came), a want for the next offer of mode, and letting an
 * offer go. */
int sbx_pool_recv_offer(sbx_session *s, int *sock, int *pidfd, sbx_net *mode, sbx_run_cgroup *rc,
			sbx_err *err);
int sbx_pool_send_want(sbx_session *s, uint32_t mode);
/* fd, or -1 when it is readable now: take will not wait (an offer, or a
 * failure or the end it reports), so there is nothing to wait for. */
int sbx_pool_unless_ready(int fd);
void sbx_pool_drop_offer(int sock, int pidfd, sbx_run_cgroup *rc);
/* Whether a warm run expired unused (init.c's recv_request shuts its
 * socket down both ways before it ends, so this holds before the process
 * is gone): it would refuse a request, so it is dropped unsent. */
bool sbx_pool_offer_expired(int sock);
/* session_ownnet.c: an SBX_NET_OWN offer the pool came across is kept
 * for the next run that wants one (or let go); and, at close, let go. */
void sbx_ownnet_keep(sbx_session *s, int sock, int pidfd, sbx_run_cgroup *rc);
void sbx_ownnet_close(sbx_session *s);

/* backend_ids.c: the ids of each backend's sessions (see there). */
int sbx_ids_self(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
int sbx_ids_mapped(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
int sbx_ids_privileged(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
int sbx_ids_privileged_own(sbx_session *s, const sbx_session_opts *o, sbx_err *err);

/* statedir.c: the session's id, its dir below the state dir (or the pinned
 * work dir); dead sessions' leftovers are swept first (at a process's first
 * open, then at most once a minute); 0 or -1 with err. */
int sbx_statedir_prepare(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
/* bubblewrap as root, pinned: s->work_stage, an empty dir of root's in the
 * state dir that each run's copy of the work dir is attached over; 0 or -1
 * with err. */
int sbx_statedir_stage(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
/* At an asynchronous close: rename the session dir out of the listing, to
 * <state>/gone/<id> (s->session_dir follows), for the reaper to remove;
 * the dead-session sweep collects it there too if we die first.  0, or -1
 * (then it stays where it is, removed there). */
int sbx_statedir_retire(sbx_session *s);
/* Remove a session dir and everything in it (not crossing mounts). */
int sbx_statedir_remove(const char *dir);

/* backend_zygote.c: backends userns and privileged.  Start clones the
 * zygote (prog stays the caller's: the zygote has its own copy) and
 * returns 1; ready waits up to timeout_ms for its ready message, *open_ns
 * receiving the open namespace's fd (or -1): 0, 1 when it has not come
 * yet, or -1 with err.  Privileged needs root. */
int sbx_zygote_backend_start(sbx_session *s, const sbx_session_opts *o, struct sock_fprog **prog,
			     sbx_err *err);
int sbx_privileged_check(const sbx_session_opts *o, sbx_err *err);
int sbx_zygote_backend_ready(sbx_session *s, int timeout_ms, int *open_ns, sbx_err *err);
/* Whether the zygote still runs (reaps it when it ended); stop kills and
 * reaps it. */
bool sbx_zygote_alive(sbx_session *s);
void sbx_zygote_stop(sbx_session *s);

/* backend_none.c: runs whose init the host forks itself (none, bubblewrap). */
int sbx_none_start(sbx_session *s, const sbx_session_opts *o);
int sbx_none_backend_start(sbx_session *s, const sbx_session_opts *o, struct sock_fprog **prog,
			   sbx_err *err);
/* take forks the run's init (none after the lifetime). */
int sbx_none_take(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc,
		  sbx_err *err);
bool sbx_none_alive(sbx_session *s);
void sbx_none_stop(sbx_session *s);
void sbx_none_reap(sbx_session *s, bool wait_all);

/* backend_bubblewrap.c: where bwrap is; after sbx_none_start, the
 * session's user namespace (as root) and the fixed bwrap arguments. */
const char *sbx_bwrap_path(void);
int sbx_bwrap_start(sbx_session *s, const sbx_session_opts *o, sbx_err *err);
/* Its check (an executable bwrap) and start (takes the filter). */
int sbx_bwrap_check(const sbx_session_opts *o, sbx_err *err);
int sbx_bwrap_backend_start(sbx_session *s, const sbx_session_opts *o, struct sock_fprog **prog,
			    sbx_err *err);
/* none's stop, then the user namespace's fd and bwrap's arguments. */
void sbx_bwrap_stop(sbx_session *s);

#endif
