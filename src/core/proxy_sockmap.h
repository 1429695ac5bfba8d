/*
 * proxy_sockmap.h: the kernel relay for the allow-list proxy's tunnels: a
 * BPF sockhash whose stream-verdict program hands each paired socket's
 * received bytes to the other socket's send side, so a tunnel's bytes are
 * never copied to or spliced through the proxy.  Internal to libsbx.
 */
#ifndef SBX_PROXY_SOCKMAP_H
#define SBX_PROXY_SOCKMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sbx_sockmap sbx_sockmap;

/* Load the verdict program and its maps (room for max_pairs pairs).  NULL,
 * with the reason in why, when the kernel or the caller's privileges do not
 * allow it: the caller relays through userspace instead. */
sbx_sockmap *sbx_sockmap_new(uint32_t max_pairs, char *why, size_t whylen);
/* From now on the kernel moves what a receives to b and what b receives to
 * a, including what already waits in their receive queues.  0; -1 (errno
 * set) with neither socket paired. */
int sbx_sockmap_pair(sbx_sockmap *m, int a, int b);
/* Stop moving (the sockets stay open); harmless for a socket not paired. */
void sbx_sockmap_unpair(sbx_sockmap *m, int a, int b);
void sbx_sockmap_free(sbx_sockmap *m);

/* Where a direction src -> dst stood when it was paired (marked before
 * sbx_sockmap_pair, with nothing of src's read but not yet given to dst). */
struct sbx_sockmap_mark {
	uint64_t rx, tx; /* bytes taken from src's receive queue; given to dst */
};
int sbx_sockmap_mark(int src, int dst, struct sbx_sockmap_mark *mk);
/* 1 when every byte src received since mk is in dst's send queue (so a
 * shutdown of dst loses nothing), 0 when some are still on their way, -1
 * (errno) when a socket cannot be asked; *moved: bytes given to dst since. */
int sbx_sockmap_caught_up(int src, int dst, const struct sbx_sockmap_mark *mk, uint64_t *moved);

#endif
