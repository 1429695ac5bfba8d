/*
 * runs_registry.c: detached runs (the request said detach = true), kept on
 * the heap apart from any request.  A record has a run id (128 random
 * bits), keeps at most SRV_DETACH_CAP bytes of events while no client is
 * attached (the oldest dropped; the next client gets a { type = "dropped",
 * events, bytes } marker first), and can be re-attached by GET
 * .../runs/{run_id}: buffered events, then live ones and the exit event.
 * A record ends when its final event reached a client, or SRV_KEEP_MS
 * after the run ended unread; at most SRV_KEEP_MAX are kept at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "stream_int.h"

static sbx_srv_run *kept_runs;
static size_t n_kept;

/* Drop the oldest events of an absent client's buffer beyond the cap. */
void sbx_srv_runs_drop_oldest(sbx_srv_run *sr)
{
	size_t off = 0, k = 0;

	while (sr->pending.len - off > SRV_DETACH_CAP && k + 1 < sr->n_ev) {
		off += sr->ev_len[k++];
		sr->dropped_events++;
	}
	if (k == 0)
		return;
	sr->dropped_bytes += off;
	memmove(sr->pending.data, sr->pending.data + off, sr->pending.len - off);
	sr->pending.len -= off;
	memmove(sr->ev_len, sr->ev_len + k, (sr->n_ev - k) * sizeof(*sr->ev_len));
	sr->n_ev -= k;
}

void sbx_srv_runs_free(sbx_srv_run *sr)
{
	if (sr->detach) {
		if (sr->kprev)
			sr->kprev->knext = sr->knext;
		else if (kept_runs == sr)
			kept_runs = sr->knext;
		if (sr->knext)
			sr->knext->kprev = sr->kprev;
		n_kept--;
	}
	free(sr->pending.data);
	free(sr->inflight.data);
	free(sr->ev_len);
	free(sr);
}

/* The oldest ended, unattached detached record, or NULL. */
static sbx_srv_run *oldest_ended(void)
{
	sbx_srv_run *found = NULL;
	for (sbx_srv_run *k = kept_runs; k; k = k->knext)
		if (!k->req && k->ended_ms && (!found || k->ended_ms <= found->ended_ms))
			found = k;
	return found;
}

bool sbx_srv_runs_keep(sbx_srv_run *sr)
{
	unsigned char rnd[16];

	if (n_kept >= SRV_KEEP_MAX && oldest_ended())
		sbx_srv_runs_free(oldest_ended());
	if (n_kept >= SRV_KEEP_MAX)
		return false;
	/* An interactive run comes named (stream.c); others get an id here. */
	if (!sr->run_id[0]) {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return false;
		for (int i = 0; i < 16; i++)
			snprintf(sr->run_id + 2 * i, 3, "%02x", rnd[i]);
	}
	sr->knext = kept_runs;
	if (kept_runs)
		kept_runs->kprev = sr;
	kept_runs = sr;
	n_kept++;
	return true;
}

void sbx_srv_stream_attach(sbx_srv *S, h2o_req_t *req, const char *sid, const char *run_id,
			   sbx_srv_fmt fmt)
{
	sbx_srv_run *sr = NULL;

	for (sbx_srv_run *k = kept_runs; k; k = k->knext)
		if (!strcmp(k->sid, sid) &&
		    sbx_srv_ct_equal(k->run_id, strlen(k->run_id), run_id, strlen(run_id)))
			sr = k;
	if (!sr || sr->final_sent) {
		sbx_srv_send_error(
			req, 404, "NotFound",
			"no detached run with that id in this session (or it was read to "
			"its end, or expired)",
			fmt);
		return;
	}
	/* The events are kept encoded as the run was started; an Accept
	 * that names only the other format cannot be served. */
	ssize_t ai = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT, -1);
	if (ai >= 0) {
		h2o_iovec_t a = req->headers.entries[ai].value;
		bool mp = h2o_strstr(a.base, a.len, H2O_STRLIT("msgpack")) != SIZE_MAX;
		bool js = h2o_strstr(a.base, a.len, H2O_STRLIT("json")) != SIZE_MAX;
		if ((mp && !js && sr->fmt != SRV_FMT_MSGPACK) ||
		    (js && !mp && sr->fmt != SRV_FMT_JSON)) {
			sbx_srv_send_error(
				req, 406, "NotAcceptable",
				sr->fmt == SRV_FMT_MSGPACK
					? "this run streams application/msgpack (as it was started)"
					: "this run streams application/x-ndjson (as it was started)",
				fmt);
			return;
		}
	}
	if (sr->req) {
		sbx_srv_send_error(req, 409, "Conflict",
				   "another client is attached to this run; one at a time", fmt);
		return;
	}
	/* What the absent client missed: a marker first, then the rest. */
	if (sr->dropped_events) {
		sbx_srv_buf nb = {0};
		sbx_srv_ev_dropped(sr, &nb);
		size_t mlen = nb.len;
		sbx_srv_buf_append(&nb, sr->pending.data, sr->pending.len);
		if (nb.len == mlen + sr->pending.len && sr->n_ev < sr->cap_ev) {
			free(sr->pending.data);
			sr->pending = nb;
			/* The marker is the oldest event now. */
			memmove(sr->ev_len + 1, sr->ev_len, sr->n_ev * sizeof(*sr->ev_len));
			sr->ev_len[0] = (uint32_t)mlen;
			sr->n_ev++;
			sr->dropped_events = sr->dropped_bytes = 0;
		} else {
			free(nb.data);
		}
	}
	sbx_srv_stream_attach_req(sr, req);
	sbx_srv_log(SRV_LOG_INFO, "event=run_attach session=%s run=%s", sr->sid, sr->run_id);
	(void)S;
	sbx_srv_stream_headers(sr, req);
	sr->sending = true;
	h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
}

void sbx_srv_stream_gc(sbx_srv *S)
{
	uint64_t now = sbx_srv_now_ms();
	sbx_srv_run *k = kept_runs;
	(void)S;
	while (k) {
		sbx_srv_run *next = k->knext;
		if (!k->req && k->ended_ms && now - k->ended_ms > SRV_KEEP_MS)
			sbx_srv_runs_free(k);
		k = next;
	}
}

void sbx_srv_stream_free_all(sbx_srv *S)
{
	(void)S;
	while (kept_runs && !kept_runs->req) {
		sbx_srv_run *k = kept_runs;
		if (!k->final) {
			k->stopped = true;
			sbx_srv_stream_release(k, "killed");
		}
		sbx_srv_runs_free(k);
	}
}
