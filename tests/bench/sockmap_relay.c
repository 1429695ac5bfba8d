/*
 * sockmap_relay.c: the kernel relay (sockmap_relay.h), loaded with the raw
 * bpf(2) syscall (no libbpf): a sockhash of the relayed sockets keyed by
 * socket cookie, a hash map from each cookie to its partner's cookie, and a
 * 24-instruction BPF_PROG_TYPE_SK_SKB stream verdict that redirects every
 * received skb to the partner's egress.  A socket whose cookie has no
 * partner gets SK_PASS (its bytes stay readable), never a silent drop; so
 * does a bare FIN (an empty skb), which redirected would fail the
 * partner's send with EPIPE: the FIN is the relay owner's to pass on, once
 * the partner has been given every byte before it (sockmap_caught_up).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sockmap_relay.h"

struct sockmap {
	int socks; /* BPF_MAP_TYPE_SOCKHASH: cookie -> socket */
	int peers; /* BPF_MAP_TYPE_HASH: cookie -> partner's cookie */
	int prog;
};

static long sys_bpf(int cmd, union bpf_attr *a)
{
	return syscall(SYS_bpf, cmd, a, sizeof(*a));
}

static int map_new(uint32_t type, uint32_t vsize, uint32_t n)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.map_type = type;
	a.key_size = 8;
	a.value_size = vsize;
	a.max_entries = n;
	return (int)sys_bpf(BPF_MAP_CREATE, &a);
}

#define INSN(c, d, s, o, i) \
	((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define LD_MAP(d, fd) \
	INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd), INSN(0, 0, 0, 0, 0)

static int prog_load(int socks, int peers, char *log, size_t loglen)
{
	const struct bpf_insn insn[] = {
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, 6, 1, 0, 0), /* r6 = skb */
		INSN(BPF_LDX | BPF_MEM | BPF_W, 1, 6, offsetof(struct __sk_buff, len), 0),
		INSN(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 19, 0), /* a bare FIN: pass */
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, 1, 6, 0, 0),
		INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_get_socket_cookie),
		INSN(BPF_STX | BPF_MEM | BPF_DW, 10, 0, -8, 0), /* fp[-8] = cookie */
		LD_MAP(1, peers),
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, 2, 10, 0, 0),
		INSN(BPF_ALU64 | BPF_ADD | BPF_K, 2, 0, 0, -8),
		INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem),
		INSN(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 10, 0), /* no partner: pass */
		INSN(BPF_LDX | BPF_MEM | BPF_DW, 1, 0, 0, 0),
		INSN(BPF_STX | BPF_MEM | BPF_DW, 10, 1, -16, 0), /* fp[-16] = partner */
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, 1, 6, 0, 0),
		LD_MAP(2, socks),
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, 3, 10, 0, 0),
		INSN(BPF_ALU64 | BPF_ADD | BPF_K, 3, 0, 0, -16),
		INSN(BPF_ALU64 | BPF_MOV | BPF_K, 4, 0, 0, 0), /* to its egress */
		INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_sk_redirect_hash),
		INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
		INSN(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, SK_PASS),
		INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	};
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_SK_SKB;
	a.insns = (uint64_t)(uintptr_t)insn;
	a.insn_cnt = sizeof(insn) / sizeof(insn[0]);
	a.license = (uint64_t)(uintptr_t) "GPL";
	a.log_buf = (uint64_t)(uintptr_t)log;
	a.log_size = (uint32_t)loglen;
	a.log_level = log ? 1 : 0;
	snprintf(a.prog_name, sizeof(a.prog_name), "sbx_relay");
	return (int)sys_bpf(BPF_PROG_LOAD, &a);
}

sockmap *sockmap_new(uint32_t max_pairs, char *why, size_t whylen)
{
	sockmap *m = calloc(1, sizeof(*m));
	union bpf_attr a;
	const char *step = "out of memory";

	if (!m)
		goto fail;
	m->socks = m->peers = m->prog = -1;
	step = "BPF_MAP_CREATE";
	if ((m->socks = map_new(BPF_MAP_TYPE_SOCKHASH, 4, 2 * max_pairs)) < 0 ||
	    (m->peers = map_new(BPF_MAP_TYPE_HASH, 8, 2 * max_pairs)) < 0)
		goto fail;
	step = "BPF_PROG_LOAD";
	if ((m->prog = prog_load(m->socks, m->peers, NULL, 0)) < 0)
		goto fail;
	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)m->socks;
	a.attach_bpf_fd = (uint32_t)m->prog;
	a.attach_type = BPF_SK_SKB_STREAM_VERDICT;
	step = "BPF_PROG_ATTACH";
	if (sys_bpf(BPF_PROG_ATTACH, &a) < 0)
		goto fail;
	return m;
fail:
	snprintf(why, whylen, "kernel relay not available: %s: %s", step, strerror(errno));
	sockmap_free(m);
	return NULL;
}

static int elem(int map, int cmd, uint64_t key, const void *val, uint64_t flags)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)map;
	a.key = (uint64_t)(uintptr_t)&key;
	a.value = (uint64_t)(uintptr_t)val;
	a.flags = flags;
	return (int)sys_bpf(cmd, &a);
}

static int cookie(int fd, uint64_t *c)
{
	socklen_t l = sizeof(*c);
	return getsockopt(fd, SOL_SOCKET, SO_COOKIE, c, &l);
}

int sockmap_pair(sockmap *m, int a, int b)
{
	uint64_t ca, cb;
	uint32_t fa = (uint32_t)a, fb = (uint32_t)b, one = 1;
	int e;

	if (cookie(a, &ca) < 0 || cookie(b, &cb) < 0)
		return -1;
	if (elem(m->peers, BPF_MAP_UPDATE_ELEM, ca, &cb, BPF_ANY) < 0 ||
	    elem(m->peers, BPF_MAP_UPDATE_ELEM, cb, &ca, BPF_ANY) < 0 ||
	    elem(m->socks, BPF_MAP_UPDATE_ELEM, ca, &fa, BPF_NOEXIST) < 0 ||
	    elem(m->socks, BPF_MAP_UPDATE_ELEM, cb, &fb, BPF_NOEXIST) < 0)
		goto fail;
	/* Bytes that arrived before the socket joined the map wait in its
	 * receive queue, and the verdict only runs on the next arrival;
	 * setting SO_RCVLOWAT runs the socket's data-ready hook now. */
	if (setsockopt(a, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) < 0 ||
	    setsockopt(b, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) < 0)
		goto fail;
	return 0;
fail:
	e = errno;
	sockmap_unpair(m, a, b);
	errno = e;
	return -1;
}

void sockmap_unpair(sockmap *m, int a, int b)
{
	uint64_t c;

	if (a >= 0 && cookie(a, &c) == 0) {
		(void)elem(m->socks, BPF_MAP_DELETE_ELEM, c, NULL, 0);
		(void)elem(m->peers, BPF_MAP_DELETE_ELEM, c, NULL, 0);
	}
	if (b >= 0 && cookie(b, &c) == 0) {
		(void)elem(m->socks, BPF_MAP_DELETE_ELEM, c, NULL, 0);
		(void)elem(m->peers, BPF_MAP_DELETE_ELEM, c, NULL, 0);
	}
}

void sockmap_free(sockmap *m)
{
	if (!m)
		return;
	if (m->prog >= 0)
		close(m->prog);
	if (m->socks >= 0)
		close(m->socks);
	if (m->peers >= 0)
		close(m->peers);
	free(m);
}

/* What src has received (*inq of it still queued, when asked) and dst has
 * been given (bytes acked + in its send queue).  TCP_INFO is read before SIOCOUTQ, so an ack in between can only
 * make tx smaller than the truth: a caller waiting for tx to catch up waits
 * longer, never shorter. */
static int counts(int src, int dst, uint64_t *rx, uint64_t *tx, int *inq)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	int outq;

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(src, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
		return -1;
	*rx = ti.tcpi_bytes_received;
	/* A FIN received takes a sequence number, counted as a byte. */
	if (ti.tcpi_state == BPF_TCP_CLOSE_WAIT || ti.tcpi_state == BPF_TCP_LAST_ACK ||
	    ti.tcpi_state == BPF_TCP_CLOSING || ti.tcpi_state == BPF_TCP_TIME_WAIT)
		*rx -= 1;
	if (inq && ioctl(src, SIOCINQ, inq) < 0)
		return -1;
	l = sizeof(ti);
	if (getsockopt(dst, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0 || ioctl(dst, SIOCOUTQ, &outq) < 0)
		return -1;
	*tx = ti.tcpi_bytes_acked + (uint64_t)outq;
	return 0;
}

int sockmap_mark(int src, int dst, struct sockmap_mark *mk)
{
	int inq;

	if (counts(src, dst, &mk->rx, &mk->tx, &inq) < 0)
		return -1;
	mk->rx -= (uint64_t)inq; /* still queued: the kernel relay moves it */
	return 0;
}

int sockmap_caught_up(int src, int dst, const struct sockmap_mark *mk, uint64_t *moved)
{
	uint64_t rx, tx;

	if (counts(src, dst, &rx, &tx, NULL) < 0)
		return -1;
	*moved = tx - mk->tx;
	return tx - mk->tx >= rx - mk->rx;
}
