/*
 * relay_peer.h: the minimal relays sbx-proxy-bench measures the proxy
 * against in the same run (the floor of relaying through userspace, and
 * of relaying in the kernel).
 */
#ifndef SBX_BENCH_RELAY_PEER_H
#define SBX_BENCH_RELAY_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Listen on an ephemeral 127.0.0.1 port (*port); every connection accepted
 * is relayed to 127.0.0.1:target by two blocking threads, each splicing
 * one direction through its own 1 MiB pipe, shutdown passed on at EOF. */
void relay_peer_splice_start(uint16_t target, uint16_t *port);
/* The same, relayed by the kernel (sockmap_relay.c); false, with why, when
 * BPF is not available here. */
bool relay_peer_sockmap_start(uint16_t target, uint16_t *port, char *why, size_t whylen);

#endif
