/*
 * stream_encode.c: the events of a streamed run, encoded as the request
 * asked (msgpack: one map per event, data as bin; JSON: one object per
 * line, NDJSON, data as a string when it is UTF-8, else data_b64) and
 * queued on the run's pending buffer.  Every control event (exit, error,
 * run, dropped) goes through encode_fields, so both formats always carry
 * the same fields.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <msgpack.h>

#include "json_escape.h"
#include "stream_int.h"

bool sbx_srv_buf_reserve(sbx_srv_buf *b, size_t len)
{
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		char *n = realloc(b->data, cap);
		if (!n)
			return false;
		b->data = n;
		b->cap = cap;
	}
	return true;
}

void sbx_srv_buf_append(sbx_srv_buf *b, const void *data, size_t len)
{
	if (!sbx_srv_buf_reserve(b, len))
		return; /* dropping output beats crashing; cannot happen at these sizes */
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const char *in, size_t len)
{
	char *out = malloc((len + 2) / 3 * 4 + 1), *p = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)(unsigned char)in[i + 1] << 8;
		if (i + 2 < len)
			v |= (unsigned char)in[i + 2];
		*p++ = b64chars[(v >> 18) & 63];
		*p++ = b64chars[(v >> 12) & 63];
		*p++ = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
		*p++ = i + 2 < len ? b64chars[v & 63] : '=';
	}
	*p = '\0';
	return out;
}

/* An event of len bytes was queued last: a detached run keeps its length
 * (its oldest events are dropped whole while no client reads). */
static void note_event(sbx_srv_run *sr, size_t len)
{
	if (!sr->detach)
		return;
	if (sr->n_ev == sr->cap_ev) {
		size_t cap = sr->cap_ev ? sr->cap_ev * 2 : 64;
		uint32_t *n = realloc(sr->ev_len, cap * sizeof(*n));
		if (!n)
			return;
		sr->ev_len = n;
		sr->cap_ev = cap;
	}
	sr->ev_len[sr->n_ev++] = (uint32_t)len;
	if (!sr->req)
		sbx_srv_runs_drop_oldest(sr);
}

/* Queue one encoded event made of two parts (head and body; body may be
 * empty): one copy of each into the pending buffer. */
static void push_event2(sbx_srv_run *sr, const void *head, size_t hlen, const void *body,
			size_t blen)
{
	size_t len = hlen + blen;
	if (!sbx_srv_buf_reserve(&sr->pending, len))
		return; /* the whole event or none of it */
	sbx_srv_buf_append(&sr->pending, head, hlen);
	if (blen)
		sbx_srv_buf_append(&sr->pending, body, blen);
	note_event(sr, len);
}

static void push_event(sbx_srv_run *sr, const void *data, size_t len)
{
	push_event2(sr, data, len, NULL, 0);
}

/* A msgpack header (a few dozen bytes) packed into a caller's array. */
struct hdr_buf {
	char *p;
	size_t len;
};

static int hdr_write(void *data, const char *buf, size_t len)
{
	struct hdr_buf *h = data;
	memcpy(h->p + h->len, buf, len);
	h->len += len;
	return 0;
}

static void json_event(sbx_srv_run *sr, json_t *ev)
{
	char *s = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (!s)
		return;
	size_t n = strlen(s);
	char *line = malloc(n + 1);
	if (line) {
		memcpy(line, s, n);
		line[n] = '\n';
		push_event(sr, line, n + 1);
		free(line);
	}
	free(s);
}

static void mp_key(msgpack_packer *pk, const char *k)
{
	size_t n = strlen(k);
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, k, n);
}

static void mp_str(msgpack_packer *pk, const char *k, const char *v)
{
	mp_key(pk, k);
	mp_key(pk, v);
}

/* One field of a control event: a string, or (str NULL) an integer. */
typedef struct ev_field {
	const char *key;
	const char *str;
	int64_t num;
} ev_field;

/* Append one event made of fields to out, as a JSON line or a msgpack map:
 * every control event (exit, error, run, dropped) is encoded here, so both
 * formats always carry the same fields. */
static void encode_fields(int fmt, const ev_field *f, size_t n, sbx_srv_buf *out)
{
	if (fmt == SRV_FMT_JSON) {
		json_t *ev = json_object();
		for (size_t i = 0; i < n; i++)
			json_object_set_new(ev, f[i].key,
					    f[i].str ? json_string(f[i].str)
						     : json_integer((json_int_t)f[i].num));
		char *js = json_dumps(ev, JSON_COMPACT);
		json_decref(ev);
		if (js) {
			sbx_srv_buf_append(out, js, strlen(js));
			sbx_srv_buf_append(out, "\n", 1);
			free(js);
		}
		return;
	}
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	for (size_t i = 0; i < n; i++) {
		if (f[i].str) {
			mp_str(&pk, f[i].key, f[i].str);
		} else {
			mp_key(&pk, f[i].key);
			msgpack_pack_int64(&pk, f[i].num);
		}
	}
	sbx_srv_buf_append(out, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
}

/* Queue one control event. */
static void emit_fields(sbx_srv_run *sr, const ev_field *f, size_t n)
{
	sbx_srv_buf b = {0};
	encode_fields(sr->fmt, f, n, &b);
	if (b.len)
		push_event(sr, b.data, b.len);
	free(b.data);
}

void sbx_srv_ev_data(sbx_srv_run *sr, const char *type, const char *data, size_t len)
{
	sbx_srv_m.bytes_streamed += len;
	if (sr->fmt == SRV_FMT_JSON) {
		/* The text escaped straight into the pending buffer (what
		 * jansson's dump would write, json_escape.c); base64 when it
		 * is not UTF-8. */
		sbx_srv_buf *b = &sr->pending;
		size_t start = b->len, tl = strlen(type);
		if (len > (SIZE_MAX - 64 - tl) / SBX_JSON_ESCAPE_MAX ||
		    !sbx_srv_buf_reserve(b, SBX_JSON_ESCAPE_MAX * len + tl + 64))
			return; /* the whole event or none of it */
		sbx_srv_buf_append(b, "{\"type\":\"", 9);
		sbx_srv_buf_append(b, type, tl);
		sbx_srv_buf_append(b, "\",\"data\":\"", 10);
		size_t n = sbx_json_escape(b->data + b->len, data, len);
		if (n != SBX_JSON_NOT_UTF8) {
			b->len += n;
			sbx_srv_buf_append(b, "\"}\n", 3);
			note_event(sr, b->len - start);
			return;
		}
		b->len = start;
		json_t *ev = json_object();
		char *b64 = base64(data, len);
		json_object_set_new(ev, "type", json_string(type));
		json_object_set_new(ev, "data_b64", json_string(b64 ? b64 : ""));
		free(b64);
		json_event(sr, ev);
		return;
	}
	/* The header is packed on the stack and the bytes appended once:
	 * no msgpack_sbuffer holding a second copy of each chunk. */
	char hdr[64];
	msgpack_packer pk;
	struct hdr_buf hb = {hdr, 0};
	msgpack_packer_init(&pk, &hb, hdr_write);
	msgpack_pack_map(&pk, 2);
	mp_str(&pk, "type", type);
	mp_key(&pk, "data");
	msgpack_pack_bin(&pk, len);
	push_event2(sr, hdr, hb.len, data, len);
}

void sbx_srv_ev_exit(sbx_srv_run *sr, const sbx_run_result *res)
{
	const ev_field f[] = {
		{"type", "exit", 0},
		{"returncode", NULL, res->returncode},
		{"runtime_ms", NULL, (int64_t)res->runtime_ms},
		{"backend", sr->backend, 0},
		/* "" for a plain exit, as on-device */
		{"termination_reason", res->term == SBX_TERM_EXIT ? "" : sbx_term_name(res->term),
		 0},
		{"signal", NULL, res->signo},
	};
	emit_fields(sr, f, res->signo ? 6 : 5);
}

void sbx_srv_ev_error(sbx_srv_run *sr, const char *kind, const char *msg)
{
	const ev_field f[] = {
		{"type", "error", 0}, {"kind", kind, 0},	   {"message", msg, 0},
		{"reason", msg, 0},   {"backend", sr->backend, 0}, {"returncode", NULL, -1},
	};
	emit_fields(sr, f, 6);
}

/* { type = "run", run_id }: the first event of a detached run. */
void sbx_srv_ev_run_id(sbx_srv_run *sr)
{
	const ev_field f[] = {{"type", "run", 0}, {"run_id", sr->run_id, 0}};
	emit_fields(sr, f, 2);
}

/* { type = "dropped", events, bytes }: what an absent client lost. */
void sbx_srv_ev_dropped(sbx_srv_run *sr, sbx_srv_buf *out)
{
	const ev_field f[] = {
		{"type", "dropped", 0},
		{"events", NULL, (int64_t)sr->dropped_events},
		{"bytes", NULL, (int64_t)sr->dropped_bytes},
	};
	encode_fields(sr->fmt, f, 3, out);
}

/* A data event read straight into the pending buffer: the fixed header
 * (bin32 whatever the length: its size is known before the read, so the
 * bytes land after it and are never moved) is written once the count is
 * known.  Bytes read (0: nothing now, see sbx_run_read_output). */
size_t sbx_srv_ev_read(sbx_srv_run *sr, int which, size_t max)
{
	static const char head_out[] = "\x82\xa4"
				       "type\xa6"
				       "stdout\xa4"
				       "data\xc6";
	static const char head_err[] = "\x82\xa4"
				       "type\xa6"
				       "stderr\xa4"
				       "data\xc6";
	const size_t hl = sizeof(head_out) - 1, total = hl + 4;

	if (sr->fmt != SRV_FMT_MSGPACK || !sbx_srv_buf_reserve(&sr->pending, total + max))
		return 0;
	char *at = sr->pending.data + sr->pending.len;
	size_t n = sbx_run_read_output(sr->run, which, at + total, max);
	if (n == 0)
		return 0;
	memcpy(at, which == 1 ? head_out : head_err, hl);
	at[hl] = (char)(n >> 24);
	at[hl + 1] = (char)(n >> 16);
	at[hl + 2] = (char)(n >> 8);
	at[hl + 3] = (char)n;
	sr->pending.len += total + n;
	sbx_srv_m.bytes_streamed += n;
	note_event(sr, total + n);
	return n;
}
