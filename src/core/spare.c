/*
 * spare.c: spare sessions, opened ahead of the open that takes them.
 *
 * A fresh set of namespaces plus a root costs about what `unshare -Umnpif
 * --mount-proc /bin/true` costs (2-3 ms here), so an open can only be
 * cheaper than that when that work was done before it.  The pool keeps up
 * to n sessions of one shape (the core options, minus the lifetime, plus
 * the caller's tag naming its policy) opened by a thread of its own.  An
 * open whose shape and tag equal the pool's takes one (sbx_spares_take);
 * any other open is cold, as without a pool.  A spare is handed out once
 * (it leaves the pool under the lock), a dead one is closed and never
 * handed out, and a new shape or tag, or a flush, closes every spare (a
 * spare made under an old policy is never handed out).  The lifetime
 * counts from the take (sbx_session_adopt tells the zygote).
 *
 * Never pooled: a pinned work_dir (host-specific), GPUs, a size-capped
 * disk, backends without a zygote (none, bubblewrap: nothing to make ahead).
 *
 * The thread lives as long as the process.  (The zygotes it asks for are
 * children of libsbx's own sbx-tpl-parent thread, zygote_template.c, so
 * their parent-death signal does not depend on this thread.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

struct key {
	char *b;
	size_t len, cap;
	bool oom;
};

static void put(struct key *k, const void *p, size_t n)
{
	if (k->oom)
		return;
	if (k->len + n > k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 1024;
		while (cap < k->len + n)
			cap *= 2;
		char *b = realloc(k->b, cap);
		if (!b) {
			k->oom = true;
			return;
		}
		k->b = b;
		k->cap = cap;
	}
	memcpy(k->b + k->len, p, n);
	k->len += n;
}

static void put_u64(struct key *k, uint64_t v)
{
	put(k, &v, sizeof(v));
}

/* A string, length-prefixed (NULL differs from ""). */
static void put_str(struct key *k, const char *s)
{
	put_u64(k, s ? strlen(s) : UINT64_MAX);
	if (s)
		put(k, s, strlen(s));
}

static void put_strv(struct key *k, const char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	put_u64(k, v ? n : UINT64_MAX);
	for (size_t i = 0; i < n; i++)
		put_str(k, v[i]);
}

/* The canonical form of o's shape: every field but the lifetime (set at
 * the take), in a fixed order, strings in full. */
static bool make_key(const sbx_session_opts *o, const char *tag, struct key *k)
{
	memset(k, 0, sizeof(*k));
	put_str(k, tag);
	put_str(k, o->backend);
	put_str(k, o->state_dir);
	put_strv(k, o->system_ro);
	put_strv(k, o->etc_files);
	put_u64(k, o->n_binds);
	for (size_t i = 0; i < o->n_binds; i++) {
		put_str(k, o->binds[i].path);
		put_u64(k, o->binds[i].writable);
	}
	put_strv(k, o->seccomp_deny);
	put_strv(k, o->seccomp_allow);
	put_str(k, o->hostname);
	put_str(k, o->ca_bundle);
	put_str(k, o->cgroup_root);
	put_strv(k, o->open_deny);
	uint64_t nums[] = {o->host_uid,	       o->aux_uid,	o->tmp_bytes, o->shm_bytes,
			   o->expire_grace_ms, o->memory_bytes, o->cpu_milli, o->pids_max,
			   o->nofile,	       o->fsize_bytes,	o->run_uid,   o->warm_runs,
			   o->warm_idle_ms,    o->network_mode, o->proxy_port};
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		put_u64(k, nums[i]);
	return !k->oom;
}

static char *dup_s(const char *s, bool *ok)
{
	char *c = s ? strdup(s) : NULL;
	if (s && !c)
		*ok = false;
	return c;
}

static const char *const *dup_v(const char *const *v, bool *ok)
{
	size_t n = 0;
	if (!v)
		return NULL;
	while (v[n])
		n++;
	char **c = calloc(n + 1, sizeof(*c));
	if (!c) {
		*ok = false;
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		c[i] = dup_s(v[i], ok);
	return (const char *const *)c;
}

static void free_v(const char *const *v)
{
	for (size_t i = 0; v && v[i]; i++)
		free((char *)v[i]);
	free((void *)v);
}

static void shape_free(sbx_session_opts *c)
{
	if (!c)
		return;
	free((char *)c->backend);
	free((char *)c->state_dir);
	free((char *)c->hostname);
	free((char *)c->ca_bundle);
	free((char *)c->cgroup_root);
	free_v(c->system_ro);
	free_v(c->etc_files);
	free_v(c->seccomp_deny);
	free_v(c->seccomp_allow);
	free_v(c->open_deny);
	for (size_t i = 0; c->binds && i < c->n_binds; i++)
		free((char *)c->binds[i].path);
	free((void *)c->binds);
	free(c);
}

/* A deep copy of o (without its lifetime), for the thread's opens. */
static sbx_session_opts *shape_dup(const sbx_session_opts *o)
{
	bool ok = true;
	sbx_session_opts *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	*c = *o;
	c->lifetime_ms = 0;
	c->work_dir = NULL;
	c->gpu_dev_dir = NULL;
	c->gpu_paths = NULL;
	c->backend = dup_s(o->backend, &ok);
	c->state_dir = dup_s(o->state_dir, &ok);
	c->hostname = dup_s(o->hostname, &ok);
	c->ca_bundle = dup_s(o->ca_bundle, &ok);
	c->cgroup_root = dup_s(o->cgroup_root, &ok);
	c->system_ro = dup_v(o->system_ro, &ok);
	c->etc_files = dup_v(o->etc_files, &ok);
	c->seccomp_deny = dup_v(o->seccomp_deny, &ok);
	c->seccomp_allow = dup_v(o->seccomp_allow, &ok);
	c->open_deny = dup_v(o->open_deny, &ok);
	c->binds = NULL;
	if (o->n_binds) {
		sbx_bind *b = calloc(o->n_binds, sizeof(*b));
		c->binds = b;
		if (!b) {
			c->n_binds = 0;
			ok = false;
		}
		for (size_t i = 0; b && i < o->n_binds; i++) {
			b[i].path = dup_s(o->binds[i].path, &ok);
			b[i].writable = o->binds[i].writable;
		}
	}
	if (!ok) {
		shape_free(c);
		return NULL;
	}
	return c;
}

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started, stopping;
	pid_t owner; /* the process the thread is in */
	pthread_t thread;
	unsigned want;		 /* how many to keep ready */
	struct key key;		 /* the shape's key (len 0: none) */
	struct key cand;	 /* follow: another shape asked for once (len 0: none) */
	sbx_session_opts *shape; /* what the thread opens */
	uint64_t gen; /* bumped whenever the shape or tag changes: late ones are closed */
	sbx_session *ready[SBX_SPARES_MAX];
	unsigned n_ready;
	bool making;
	sbx_spares_stats st;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

bool sbx_spares_poolable(const sbx_session_opts *o, const char **why)
{
	const char *w = NULL;
	if (!o->backend || (strcmp(o->backend, "userns") && strcmp(o->backend, "privileged")))
		w = "only backends userns and privileged keep spares (the others build nothing "
		    "ahead of a run)";
	else if (o->work_dir)
		w = "a pinned work_dir is never pooled (it is host-specific)";
	else if (o->gpus)
		w = "sessions with GPUs are never pooled";
	else if (o->disk_bytes)
		w = "sessions with disk_mb are never pooled";
	if (why)
		*why = w;
	return !w;
}

/* Under the lock: the spares to close (outside it), the pool emptied. */
static unsigned take_all(sbx_session **out)
{
	unsigned n = P.n_ready;
	memcpy(out, P.ready, n * sizeof(*out));
	P.n_ready = 0;
	P.st.ready = 0;
	return n;
}

static void close_all(sbx_session **v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		sbx_session_close(v[i], NULL);
}

static void *refill_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&P.mu);
	while (!P.stopping) {
		if (!P.shape || P.n_ready >= P.want) {
			pthread_cond_wait(&P.cv, &P.mu);
			continue;
		}
		uint64_t gen = P.gen;
		sbx_session_opts *o = shape_dup(P.shape);
		P.making = true;
		pthread_mutex_unlock(&P.mu);
		sbx_err err = {0};
		sbx_session *s = o ? sbx_session_open(o, &err) : NULL;
		shape_free(o);
		pthread_mutex_lock(&P.mu);
		P.making = false;
		pthread_cond_broadcast(&P.cv);
		if (s && gen == P.gen && !P.stopping && P.n_ready < P.want) {
			P.ready[P.n_ready++] = s;
			P.st.ready = P.n_ready;
			P.st.made++;
			continue;
		}
		if (s) {
			pthread_mutex_unlock(&P.mu);
			sbx_session_close(s, NULL);
			pthread_mutex_lock(&P.mu);
			continue;
		}
		/* A shape that cannot open now: try again in a second, not in
		 * a loop (a flush or new shape wakes us sooner). */
		P.st.failed++;
		snprintf(P.st.last_error, sizeof(P.st.last_error), "%.255s", err.msg);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		while (!P.stopping && gen == P.gen &&
		       pthread_cond_timedwait(&P.cv, &P.mu, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&P.mu);
	return NULL;
}

/* At exit: the thread stops (after the open it is in, bounded by the
 * ready timeout), the spares are closed: nothing is left behind. */
static void spares_atexit(void)
{
	sbx_session *v[SBX_SPARES_MAX];
	if (getpid() != P.owner)
		return; /* a forked child's exit: the spares are its parent's */
	pthread_mutex_lock(&P.mu);
	P.stopping = true;
	pthread_cond_broadcast(&P.cv);
	bool started = P.started;
	pthread_mutex_unlock(&P.mu);
	if (started)
		pthread_join(P.thread, NULL);
	pthread_mutex_lock(&P.mu);
	unsigned n = take_all(v);
	pthread_mutex_unlock(&P.mu);
	close_all(v, n);
}

/* Under the lock: start the thread once (signals stay with the caller's
 * threads). */
static int start_thread(sbx_err *err)
{
	sigset_t all, old;
	if (P.started)
		return 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&P.thread, NULL, refill_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, rc, "spare sessions: pthread_create: %s",
				   strerror(rc));
	P.started = true;
	P.owner = getpid();
	atexit(spares_atexit);
	return 0;
}

static void key_clear(struct key *k)
{
	free(k->b);
	memset(k, 0, sizeof(*k));
}

static bool key_eq(const struct key *a, const struct key *b)
{
	return a->len == b->len && a->b && b->b && !memcmp(a->b, b->b, a->len);
}

/* follow: sbxd's pool of the last-opened shape moves to a new shape only
 * when two opens in a row asked for it.  Tenants opening two shapes in
 * turn made it close and reopen its spares at every open: twice the work
 * per open, and never a spare to take. */
static int keep(const sbx_session_opts *o, unsigned n, const char *tag, bool follow, sbx_err *err)
{
	const char *why;
	struct key k;
	sbx_session *old[SBX_SPARES_MAX];
	unsigned n_old = 0;

	if (n > SBX_SPARES_MAX)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "spare sessions: at most %d, got %u", SBX_SPARES_MAX, n);
	if (n && !sbx_spares_poolable(o, &why))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "spare sessions: %s", why);
	if (n && !make_key(o, tag, &k)) {
		free(k.b);
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	}
	sbx_session_opts *shape = n ? shape_dup(o) : NULL;
	if (n && !shape) {
		free(k.b);
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	}
	pthread_mutex_lock(&P.mu);
	bool same = n && P.shape && P.key.len == k.len && !memcmp(P.key.b, k.b, k.len);
	if (follow && n && P.shape && !same && !key_eq(&P.cand, &k)) {
		/* Once: remembered, the pool stays as it is. */
		key_clear(&P.cand);
		P.cand = k;
		pthread_mutex_unlock(&P.mu);
		shape_free(shape);
		return 0;
	}
	if (follow)
		key_clear(&P.cand);
	if (!same) {
		/* A new shape or policy: nothing made for the old one stays. */
		n_old = take_all(old);
		P.gen++;
		shape_free(P.shape);
		free(P.key.b);
		P.shape = shape;
		shape = NULL;
		if (n)
			P.key = k;
		else
			memset(&P.key, 0, sizeof(P.key));
	} else {
		free(k.b);
	}
	/* Fewer wanted: the extra ones go. */
	while (P.n_ready > n)
		old[n_old++] = P.ready[--P.n_ready];
	P.st.ready = P.n_ready;
	P.want = n;
	P.st.want = n;
	int rc = n ? start_thread(err) : 0;
	pthread_cond_broadcast(&P.cv);
	pthread_mutex_unlock(&P.mu);
	shape_free(shape);
	close_all(old, n_old);
	return rc;
}

int sbx_spares_keep(const sbx_session_opts *o, unsigned n, const char *tag, sbx_err *err)
{
	return keep(o, n, tag, false, err);
}

int sbx_spares_follow(const sbx_session_opts *o, unsigned n, const char *tag, sbx_err *err)
{
	return keep(o, n, tag, true, err);
}

void sbx_spares_flush(void)
{
	sbx_session *old[SBX_SPARES_MAX];
	pthread_mutex_lock(&P.mu);
	unsigned n = take_all(old);
	P.gen++;
	shape_free(P.shape);
	P.shape = NULL;
	free(P.key.b);
	memset(&P.key, 0, sizeof(P.key));
	key_clear(&P.cand);
	P.want = P.st.want = 0;
	P.st.flushed += n;
	pthread_cond_broadcast(&P.cv);
	pthread_mutex_unlock(&P.mu);
	close_all(old, n);
}

sbx_session *sbx_spares_take(const sbx_session_opts *o, const char *tag, sbx_err *err)
{
	struct key k;

	memset(err, 0, sizeof(*err));
	pthread_mutex_lock(&P.mu);
	bool any = P.shape != NULL;
	pthread_mutex_unlock(&P.mu);
	if (!any || !sbx_spares_poolable(o, NULL))
		return NULL;
	if (!make_key(o, tag, &k)) {
		free(k.b);
		return NULL; /* out of memory: the cold open says so */
	}
	/* Made under another policy (the key starts with the tag): the pool
	 * is emptied, fail closed; the open is cold. */
	struct key t;
	memset(&t, 0, sizeof(t));
	put_str(&t, tag);
	pthread_mutex_lock(&P.mu);
	bool stale = P.shape && !t.oom && (P.key.len < t.len || memcmp(P.key.b, t.b, t.len));
	pthread_mutex_unlock(&P.mu);
	free(t.b);
	if (stale) {
		sbx_spares_flush();
		free(k.b);
		return NULL;
	}
	for (;;) {
		sbx_session *s = NULL;
		pthread_mutex_lock(&P.mu);
		if (P.shape && P.key.len == k.len && !memcmp(P.key.b, k.b, k.len)) {
			if (P.n_ready) {
				s = P.ready[0];
				memmove(P.ready, P.ready + 1, --P.n_ready * sizeof(P.ready[0]));
				P.st.ready = P.n_ready;
			} else {
				P.st.missed++;
			}
			pthread_cond_broadcast(&P.cv); /* refill */
		}
		pthread_mutex_unlock(&P.mu);
		if (!s)
			break;
		/* One whose zygote died (killed, OOM) is never handed out. */
		sbx_err aerr = {0};
		if (!sbx_session_alive(s) || sbx_session_adopt(s, o, &aerr) < 0) {
			sbx_session_close(s, NULL);
			pthread_mutex_lock(&P.mu);
			P.st.dead++;
			pthread_mutex_unlock(&P.mu);
			continue;
		}
		pthread_mutex_lock(&P.mu);
		P.st.taken++;
		pthread_mutex_unlock(&P.mu);
		free(k.b);
		return s;
	}
	free(k.b);
	return NULL;
}

void sbx_spares_get_stats(sbx_spares_stats *st)
{
	pthread_mutex_lock(&P.mu);
	*st = P.st;
	st->making = P.making;
	pthread_mutex_unlock(&P.mu);
}
