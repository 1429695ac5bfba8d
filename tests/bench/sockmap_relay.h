/*
 * sockmap_relay.h: a kernel relay for sbx-proxy-bench: a BPF sockhash whose
 * stream-verdict program hands each paired socket's received bytes to the
 * other socket's send side, so a tunnel's bytes never pass through the
 * relay process.  It is the bench's measure of what the kernel can do, not
 * a path of the proxy: on this kernel (6.18) a redirect to egress has no
 * backpressure, so a peer that stops reading makes the kernel queue
 * whatever the other side sends, without bound and outside the sockets'
 * memory accounting (the bench prints how much).  The proxy must bound
 * what a sandbox can make the host buffer, so it keeps its splice relay.
 */
#ifndef SBX_BENCH_SOCKMAP_RELAY_H
#define SBX_BENCH_SOCKMAP_RELAY_H

#include <stddef.h>
#include <stdint.h>

typedef struct sockmap sockmap;

/* Load the verdict program and its maps (room for max_pairs pairs).  NULL,
 * with the reason in why, when the kernel or the caller's privileges do not
 * allow it: the caller relays through userspace instead. */
sockmap *sockmap_new(uint32_t max_pairs, char *why, size_t whylen);
/* From now on the kernel moves what a receives to b and what b receives to
 * a, including what already waits in their receive queues.  0; -1 (errno
 * set) with neither socket paired. */
int sockmap_pair(sockmap *m, int a, int b);
/* Stop moving (the sockets stay open); harmless for a socket not paired. */
void sockmap_unpair(sockmap *m, int a, int b);
void sockmap_free(sockmap *m);

/* Where a direction src -> dst stood when it was paired (marked before
 * sockmap_pair, with nothing of src's read but not yet given to dst). */
struct sockmap_mark {
	uint64_t rx, tx; /* bytes taken from src's receive queue; given to dst */
};
int sockmap_mark(int src, int dst, struct sockmap_mark *mk);
/* 1 when every byte src received since mk is in dst's send queue (so a
 * shutdown of dst loses nothing), 0 when some are still on their way, -1
 * (errno) when a socket cannot be asked; *moved: bytes given to dst since. */
int sockmap_caught_up(int src, int dst, const struct sockmap_mark *mk, uint64_t *moved);

#endif
