/*
 * backend_ids.c: whose ids a session's processes have, per backend (the
 * functions backend.c's table points at).  The host ids own the work dir
 * and run the sandbox; the inside ids are the workload's within its own
 * root (who owns that root's files).
 *
 *   none        the caller's own ids; no root of its own
 *   userns,     as root: a dedicated unprivileged host uid (host_uid
 *   bubblewrap  option) mapped to the sandbox user, and two aux ids for
 *               inside root and nobody (userns.c); else the caller's ids
 *   privileged  as root: a host uid of the session's own (from its id's
 *               random bits, or the run_uid option), which is also its
 *               inside uid (no user namespace)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session_impl.h"

static void ids_self(sbx_session *s)
{
	s->host_uid = geteuid();
	s->host_gid = getegid();
}

/* Backend none: the caller's ids. */
int sbx_ids_self(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	(void)o;
	(void)err;
	ids_self(s);
	s->inside_uid = s->host_uid;
	s->inside_gid = s->host_gid;
	return 0;
}

/* userns as root: the host ids of inside root (sbx-init) and nobody; they
 * must be unprivileged and not the sandbox user's, or the workload would
 * be init's user again. */
static int set_aux_uid(sbx_session *s, uid_t aux, sbx_err *err)
{
	if (aux == 0 || aux > UINT32_MAX - 2 || s->host_uid == aux || s->host_uid == aux + 1)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "aux_uid %u: must be an unprivileged host id whose next id is "
				   "free too, and neither may be the sandbox's host uid %u",
				   (unsigned)aux, (unsigned)s->host_uid);
	s->aux_uid = aux;
	return 0;
}

/* Backends userns and bubblewrap: a user namespace maps the sandbox user. */
int sbx_ids_mapped(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	s->inside_uid = SBX_SANDBOX_UID;
	s->inside_gid = SBX_SANDBOX_GID;
	if (geteuid() != 0) {
		ids_self(s);
		return 0;
	}
	s->host_uid = o->host_uid ? o->host_uid : SBX_DEFAULT_HOST_UID;
	s->host_gid = (gid_t)s->host_uid;
	return set_aux_uid(s, o->aux_uid ? o->aux_uid : SBX_DEFAULT_AUX_UID, err);
}

/* Backend privileged, before the session's dir: the host_uid option (its
 * own uid comes with the session id, sbx_ids_privileged_own). */
int sbx_ids_privileged(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	(void)err;
	if (geteuid() != 0) {
		ids_self(s);
	} else {
		s->host_uid = o->host_uid ? o->host_uid : SBX_DEFAULT_HOST_UID;
		s->host_gid = (gid_t)s->host_uid;
	}
	return 0;
}

/* Backend privileged, once the session's id and dir exist: a uid of its
 * own per session (from the id's random bits), unless the caller chose
 * one: sessions cannot signal or ptrace each other even where they share
 * something.  No user namespace: it is the inside uid too. */
int sbx_ids_privileged_own(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	unsigned v =
		(unsigned)strtoul((char[]){s->id[0], s->id[1], s->id[2], s->id[3], 0}, NULL, 16);
	s->host_uid = o->run_uid ? o->run_uid : PRIV_UID_BASE + v % PRIV_UID_SPAN;
	s->host_gid = (gid_t)s->host_uid;
	s->inside_uid = s->host_uid;
	s->inside_gid = s->host_gid;
	if (!s->pinned && chown(s->work_dir, s->host_uid, s->host_gid) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "chown %s: %s", s->work_dir,
				   strerror(errno));
	return 0;
}
