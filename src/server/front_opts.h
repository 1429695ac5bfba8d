/*
 * front_opts.h: the front's options (front_opts.c): its limits, their
 * defaults and flags.  Apart from front.h so the guard's unit test uses
 * the same defaults without h2o.
 */
#ifndef SBX_FRONT_OPTS_H
#define SBX_FRONT_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "h2guard.h"

typedef struct sbx_front_opts {
	sbx_h2g_limits lim;	     /* per connection (held_total set by the front) */
	uint32_t max_conns;	     /* 0: from RLIMIT_NOFILE */
	uint32_t max_conns_per_addr; /* 0: half of max_conns */
	uint32_t header_timeout_s;
	uint32_t idle_timeout_s;
	sbx_h2g_rate rst_shared; /* resets before an answer per tenant/source */
	uint32_t cooldown_s;	 /* a tenant/source that spent it is refused */
} sbx_front_opts;

/* Defaults, filled before the flags are parsed. */
extern sbx_front_opts sbx_front_o;
void sbx_front_defaults(sbx_front_opts *o);
/* After the flags: fill what was left 0 from sbxd's --max-body and the
 * descriptor limit (nofile). */
void sbx_front_derive(sbx_front_opts *o, uint64_t max_body, uint64_t nofile);

/* Parse one of the front's flags (getopt long option name without "--");
 * returns 1 when it was one (bad set on a bad value), 0 when not. */
int sbx_front_flag(const char *name, const char *value, bool *bad);
/* "[--flag VALUE] ..." for the usage text. */
extern const char *const sbx_front_usage;

#endif
