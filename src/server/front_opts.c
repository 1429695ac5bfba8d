/*
 * front_opts.c: the front's flags (front_opts.h), their defaults and why, and
 * their parsing: header budgets, frame rates (RATE[:BURST]), body
 * budgets, connection budgets and timeouts.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front_opts.h"

sbx_front_opts sbx_front_o;

void sbx_front_defaults(sbx_front_opts *o)
{
	sbx_h2g_limits *l = &o->lim;
	memset(o, 0, sizeof(*o));
	/* nghttp2 and nginx both bound a request's headers near 64 KiB. */
	l->max_header_list = 64 * 1024;
	l->max_header_fields = 256;
	l->max_continuations = 32;
	/* RATE per second, BURST banked.  RST_STREAM: nghttp2's rapid-reset
	 * defaults (1000 burst, 33/s); streams: far above h2load -m 32 at a
	 * few thousand runs/s; the control frames: what no client needs. */
	l->rst = (sbx_h2g_rate){33, 1000};
	l->empty = (sbx_h2g_rate){10, 100};
	l->continuation = (sbx_h2g_rate){200, 1000};
	l->ping = (sbx_h2g_rate){10, 100};
	l->settings = (sbx_h2g_rate){10, 100};
	l->priority = (sbx_h2g_rate){100, 1000};
	l->window_update = (sbx_h2g_rate){100, 1000};
	l->streams = (sbx_h2g_rate){5000, 10000};
	/* body_conn/body_total 0: derived from --max-body in sbx_front_start. */
	o->header_timeout_s = 10;
	o->idle_timeout_s = 10; /* h2o's own HTTP/2 idle timeout before the front */
	/* Across reconnects: a tenant (or an unauthenticated source) may reset
	 * 500 requests before their answer at once, 33/s after, then its
	 * requests close their connections for 10 s. */
	o->rst_shared = (sbx_h2g_rate){33, 500};
	o->cooldown_s = 10;
}

void sbx_front_derive(sbx_front_opts *o, uint64_t max_body, uint64_t nofile)
{
	/* A connection may hold a few --max-body requests at once, the server
	 * sixteen: bounded, yet parallel uploads of one client fit. */
	o->lim.max_body = max_body;
	if (o->lim.body_conn == 0)
		o->lim.body_conn = 4 * (uint64_t)max_body;
	if (o->lim.body_total == 0)
		o->lim.body_total = 16 * (uint64_t)max_body;
	if (o->max_conns == 0) {
		/* Each connection costs 3 descriptors (client, both ends of the
		 * socketpair); a quarter of the limit stays for sessions. */
		uint64_t n = (nofile - nofile / 4) / 3;
		o->max_conns = n < 16 ? 16 : n > 100000 ? 100000 : (uint32_t)n;
	}
	/* A source gets 1/32 of the total (at least 4): 20 sources, or 31,
	 * cannot fill it, and beyond that idle ones are shed first. */
	if (o->max_conns_per_addr == 0)
		o->max_conns_per_addr = o->max_conns / 32 > 4 ? o->max_conns / 32 : 4;
}

static int rate_arg(const char *v, sbx_h2g_rate *r)
{
	char *end;
	errno = 0;
	double rate = strtod(v, &end), burst;
	if (errno || end == v || rate <= 0)
		return -1;
	if (*end == ':') {
		const char *b = end + 1;
		burst = strtod(b, &end);
		if (errno || end == b || burst < 1)
			return -1;
	} else {
		burst = rate * 10 > 1 ? rate * 10 : 1;
	}
	if (*end)
		return -1;
	r->rate = rate;
	r->burst = burst;
	return 0;
}

static int u64_arg(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || n < min || n > max)
		return -1;
	*out = n;
	return 0;
}

const char *const sbx_front_usage =
	"            [--max-header-list BYTES] [--max-header-fields N] [--max-continuations N]\n"
	"            [--rate-rst R[:B]] [--rate-empty R[:B]] [--rate-continuation R[:B]]\n"
	"            [--rate-ping R[:B]] [--rate-settings R[:B]] [--rate-priority R[:B]]\n"
	"            [--rate-window-update R[:B]] [--rate-streams R[:B]]\n"
	"            [--rate-rst-shared R[:B]] [--abuse-cooldown-s S]\n"
	"            [--body-budget-conn BYTES] [--body-budget-total BYTES]\n"
	"            [--max-conns N] [--max-conns-per-addr N] [--header-timeout-s S]\n"
	"            [--conn-idle-timeout-s S]\n";

int sbx_front_flag(const char *name, const char *v, bool *bad)
{
	static const struct {
		const char *name;
		size_t off;
	} rates[] = {
		{"rate-rst", offsetof(sbx_h2g_limits, rst)},
		{"rate-empty", offsetof(sbx_h2g_limits, empty)},
		{"rate-continuation", offsetof(sbx_h2g_limits, continuation)},
		{"rate-ping", offsetof(sbx_h2g_limits, ping)},
		{"rate-settings", offsetof(sbx_h2g_limits, settings)},
		{"rate-priority", offsetof(sbx_h2g_limits, priority)},
		{"rate-window-update", offsetof(sbx_h2g_limits, window_update)},
		{"rate-streams", offsetof(sbx_h2g_limits, streams)},
	};
	sbx_front_opts *o = &sbx_front_o;
	uint64_t n = 0;
	int rv = -2;

	for (size_t i = 0; i <= sizeof(rates) / sizeof(rates[0]); i++)
		if (i == sizeof(rates) / sizeof(rates[0]) ? !strcmp(name, "rate-rst-shared")
							  : !strcmp(name, rates[i].name)) {
			sbx_h2g_rate *r =
				i == sizeof(rates) / sizeof(rates[0])
					? &o->rst_shared
					: (sbx_h2g_rate *)((char *)&o->lim + rates[i].off);
			if (rate_arg(v, r) != 0) {
				fprintf(stderr,
					"sbxd: --%s %s: expected RATE or RATE:BURST (per second, "
					"RATE > 0, BURST >= 1)\n",
					name, v);
				*bad = true;
			}
			return 1;
		}
	if (!strcmp(name, "max-header-list")) {
		rv = u64_arg(v, 1024, 16u << 20, &n);
		o->lim.max_header_list = (uint32_t)n;
	} else if (!strcmp(name, "max-header-fields")) {
		rv = u64_arg(v, 8, 100000, &n);
		o->lim.max_header_fields = (uint32_t)n;
	} else if (!strcmp(name, "max-continuations")) {
		rv = u64_arg(v, 1, 100000, &n);
		o->lim.max_continuations = (uint32_t)n;
	} else if (!strcmp(name, "body-budget-conn")) {
		rv = u64_arg(v, 1024, 1ull << 40, &n);
		o->lim.body_conn = n;
	} else if (!strcmp(name, "body-budget-total")) {
		rv = u64_arg(v, 1024, 1ull << 44, &n);
		o->lim.body_total = n;
	} else if (!strcmp(name, "max-conns")) {
		rv = u64_arg(v, 1, 1000000, &n);
		o->max_conns = (uint32_t)n;
	} else if (!strcmp(name, "max-conns-per-addr")) {
		rv = u64_arg(v, 1, 1000000, &n);
		o->max_conns_per_addr = (uint32_t)n;
	} else if (!strcmp(name, "header-timeout-s")) {
		rv = u64_arg(v, 1, 3600, &n);
		o->header_timeout_s = (uint32_t)n;
	} else if (!strcmp(name, "abuse-cooldown-s")) {
		rv = u64_arg(v, 1, 24 * 3600, &n);
		o->cooldown_s = (uint32_t)n;
	} else if (!strcmp(name, "conn-idle-timeout-s")) {
		rv = u64_arg(v, 1, 24 * 3600, &n);
		o->idle_timeout_s = (uint32_t)n;
	}
	if (rv == -2)
		return 0;
	if (rv != 0) {
		fprintf(stderr, "sbxd: --%s %s: out of range or not a number\n", name, v);
		*bad = true;
	}
	return 1;
}
