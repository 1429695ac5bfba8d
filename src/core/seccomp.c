/*
 * seccomp.c: the syscall filter every workload runs under.
 *
 * The filter is an allow-list, built once per session and emitted here as
 * a plain BPF program (no libseccomp rule engine: it drops conditional
 * rules when a syscall also has an unconditional one, and 2.5.4 cannot
 * name syscalls above 451), so starting a run costs one seccomp() call and
 * no allocation.  Its shape:
 *
 *   - the architecture is checked first; another ABI (i386 through
 *     int 0x80, x32 numbers with bit 0x40000000) kills the process, because
 *     a second syscall table would be a second, unfiltered door;
 *   - syscalls are matched by number, from a table compiled in for this
 *     architecture (seccomp_<arch>.h): a number the table does not list,
 *     e.g. one a newer kernel added, fails with ENOSYS like on an older
 *     kernel, and programs fall back;
 *   - the profile (seccomp_profile.h) says per name: allowed, allowed for
 *     some arguments (one small BPF block each), or refused with an errno
 *     (EPERM for the dangerous, so programs see an ordinary error);
 *   - the lookup is a binary search over runs of consecutive numbers that
 *     share an answer, so an allowed syscall costs a handful of compares.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbx.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

struct sbx_sysent {
	int nr;
	const char *name;
};

#include "seccomp_profile.h"

#if defined(__x86_64__) && !defined(__ILP32__)
#include "seccomp_x86_64.h"
#define SBX_SC_ARCH "x86_64"
#define SBX_SC_AUDIT_ARCH AUDIT_ARCH_X86_64
#define SBX_SC_TABLE sbx_sys_x86_64
/* x32 numbers carry this bit; the top number, -1, is left to the kernel
 * (it answers ENOSYS; tracers use it to skip a call). */
#define SBX_SC_FOREIGN_FROM 0x40000000u
#define SBX_SC_FOREIGN_TO 0xfffffffeu
#endif

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e)&SECCOMP_RET_DATA))
#define RET_ALLOW SECCOMP_RET_ALLOW
#define RET_KILL SECCOMP_RET_KILL_PROCESS

/* The low 32 bits of argument i: the kernel reads int arguments (socket
 * family, pid, ioctl request, personality) as 32 bits, so the upper half
 * must neither hide nor fake a value. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#else
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i) + 4)
#endif

#define LD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define RET(k) BPF_STMT(BPF_RET | BPF_K, (k))
#define JEQ(k, t, f) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), (t), (f))

const char *sbx_seccomp_arch(void)
{
#ifdef SBX_SC_ARCH
	return SBX_SC_ARCH;
#else
	return NULL;
#endif
}

/* ---- the profile ---- */

/* true when name is in the NULL-terminated list. */
static bool sbx_listed(const char *const *list, const char *name)
{
	for (; list && *list; list++)
		if (strcmp(*list, name) == 0)
			return true;
	return false;
}

static int sbx_widen_errno(const char *name)
{
	size_t i;

	for (i = 0; i < N_OF(sbx_sc_widen); i++)
		if (strcmp(sbx_sc_widen[i].name, name) == 0)
			return sbx_sc_widen[i].err;
	return 0;
}

/* Fill e from the compiled profile; false when the profile does not list
 * the name (it then gets the default, ENOSYS). */
static bool sbx_profile_entry(const char *name, sbx_seccomp_entry *e)
{
	size_t i;

	e->name = name;
	e->action = SBX_SC_REFUSED;
	e->err = ENOSYS;
	e->rule = NULL;
	e->widenable = false;
	if (sbx_listed(sbx_sc_allow, name)) {
		e->action = SBX_SC_ALLOWED;
		return true;
	}
	for (i = 0; i < N_OF(sbx_sc_args); i++) {
		if (strcmp(sbx_sc_args[i].name, name) == 0) {
			e->action = SBX_SC_ARGS;
			e->rule = sbx_sc_args[i].rule;
			return true;
		}
	}
	for (i = 0; i < N_OF(sbx_sc_refuse); i++) {
		if (strcmp(sbx_sc_refuse[i].name, name) == 0) {
			e->err = sbx_sc_refuse[i].err;
			return true;
		}
	}
	e->err = sbx_widen_errno(name);
	e->widenable = e->err != 0;
	if (!e->widenable)
		e->err = ENOSYS;
	return e->widenable;
}

#ifdef SBX_SC_ARCH
static const struct sbx_sysent *sbx_sys_find(const char *name)
{
	size_t i;

	for (i = 0; i < N_OF(SBX_SC_TABLE); i++)
		if (strcmp(SBX_SC_TABLE[i].name, name) == 0)
			return &SBX_SC_TABLE[i];
	return NULL;
}

static int sbx_args_block(const char *name);
static int sbx_setid_block(const char *name);

/* The compiled profile's answer for each entry of the table, found once
 * per process: finding it is a linear scan of the name lists per syscall
 * (~200,000 strcmp, 0.2 ms: a twentieth of a session's open), and the
 * lists never change.  A session's deny and allow lists apply on top. */
struct sbx_base {
	sbx_seccomp_entry e;
	int args_block;	 /* SBX_SC_ARGS: its argument block */
	int setid_block; /* the setid guard's block, or -1 */
	bool init_need;	 /* in sbx_sc_init_needs */
};
static struct sbx_base sbx_base_v[N_OF(SBX_SC_TABLE)];
static pthread_once_t sbx_base_once = PTHREAD_ONCE_INIT;

static void sbx_base_init(void)
{
	for (size_t i = 0; i < N_OF(SBX_SC_TABLE); i++) {
		struct sbx_base *b = &sbx_base_v[i];

		sbx_profile_entry(SBX_SC_TABLE[i].name, &b->e);
		b->e.nr = SBX_SC_TABLE[i].nr;
		b->args_block = sbx_args_block(SBX_SC_TABLE[i].name);
		b->setid_block = sbx_setid_block(SBX_SC_TABLE[i].name);
		for (size_t k = 0; k < N_OF(sbx_sc_init_needs); k++)
			b->init_need |= strcmp(sbx_sc_init_needs[k], SBX_SC_TABLE[i].name) == 0;
	}
}
#endif

/* See sbx.h. */
sbx_seccomp_entry *sbx_seccomp_profile(const char *const *deny, const char *const *allow, size_t *n,
				       sbx_err *err)
{
#ifndef SBX_SC_ARCH
	(void)deny;
	(void)allow;
	(void)n;
	sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
		    "seccomp: no syscall table for this architecture; sbx refuses to run "
		    "a sandbox unfiltered");
	return NULL;
#else
	const char *const *p;
	sbx_seccomp_entry *v;
	size_t i;

	/* A deny name may be one of another architecture only (libseccomp
	 * knows every architecture's names): it then refuses nothing here, so
	 * one policy can serve several architectures. */
	for (p = deny; p && *p; p++) {
		if (!**p ||
		    (!sbx_sys_find(*p) && seccomp_syscall_resolve_name(*p) == __NR_SCMP_ERROR)) {
			sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				    "seccomp_deny: unknown syscall \"%.64s\"", *p);
			return NULL;
		}
	}
	for (p = allow; p && *p; p++) {
		sbx_seccomp_entry e;

		if (!sbx_sys_find(*p)) {
			sbx_err_set(
				err, SBX_E_INVALID_ARGUMENT, 0,
				"seccomp_allow: unknown syscall \"%.64s\" (not in the %s table)",
				*p, SBX_SC_ARCH);
			return NULL;
		}
		sbx_profile_entry(*p, &e);
		if (e.action == SBX_SC_REFUSED && !e.widenable) {
			sbx_err_set(
				err, SBX_E_INVALID_ARGUMENT, 0,
				"seccomp_allow: \"%.64s\" cannot be allowed (only the widenable "
				"syscalls can: see --check-policy)",
				*p);
			return NULL;
		}
	}
	v = calloc(N_OF(SBX_SC_TABLE), sizeof(*v));
	if (!v) {
		sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "seccomp: out of memory");
		return NULL;
	}
	pthread_once(&sbx_base_once, sbx_base_init);
	for (i = 0; i < N_OF(SBX_SC_TABLE); i++) {
		sbx_seccomp_entry *e = &v[i];

		*e = sbx_base_v[i].e;
		if (e->widenable && sbx_listed(allow, e->name))
			e->action = SBX_SC_ALLOWED;
		/* Narrowing turns an allowed call into EPERM; one refused
		 * already keeps its errno (clone3 must stay ENOSYS). */
		if (e->action != SBX_SC_REFUSED && sbx_listed(deny, e->name)) {
			e->action = SBX_SC_REFUSED;
			e->err = EPERM;
			e->rule = NULL;
		}
	}
	*n = N_OF(SBX_SC_TABLE);
	return v;
#endif
}

/* How many of the profile's lists name name. */
static int sbx_profile_count(const char *name)
{
	int c = sbx_listed(sbx_sc_allow, name) ? 1 : 0;
	size_t i;

	for (i = 0; i < N_OF(sbx_sc_args); i++)
		c += strcmp(sbx_sc_args[i].name, name) == 0;
	for (i = 0; i < N_OF(sbx_sc_refuse); i++)
		c += strcmp(sbx_sc_refuse[i].name, name) == 0;
	for (i = 0; i < N_OF(sbx_sc_widen); i++)
		c += strcmp(sbx_sc_widen[i].name, name) == 0;
	return c;
}

/* The profile names one syscall of this table once: a typo would turn an
 * allowed call into ENOSYS without a word. */
static int sbx_check_name(const char *name, sbx_err *err)
{
#ifdef SBX_SC_ARCH
	if (!sbx_sys_find(name))
		return sbx_err_set(err, SBX_E_EXECUTION, 0,
				   "seccomp profile: \"%s\" is not in the %s table", name,
				   SBX_SC_ARCH);
#endif
	if (sbx_profile_count(name) != 1)
		return sbx_err_set(err, SBX_E_EXECUTION, 0,
				   "seccomp profile: \"%s\" is in more than one list", name);
	return 0;
}

/* See sbx.h. */
int sbx_seccomp_selfcheck(sbx_err *err)
{
	const char *const *p;
	size_t i;

	for (p = sbx_sc_allow; *p; p++)
		if (sbx_check_name(*p, err) < 0)
			return -1;
	for (i = 0; i < N_OF(sbx_sc_args); i++)
		if (sbx_check_name(sbx_sc_args[i].name, err) < 0)
			return -1;
	for (i = 0; i < N_OF(sbx_sc_refuse); i++)
		if (sbx_check_name(sbx_sc_refuse[i].name, err) < 0)
			return -1;
	for (i = 0; i < N_OF(sbx_sc_widen); i++)
		if (sbx_check_name(sbx_sc_widen[i].name, err) < 0)
			return -1;
	/* A typo here would leave init without a call it needs. */
	for (i = 0; i < N_OF(sbx_sc_init_needs); i++)
		if (sbx_profile_count(sbx_sc_init_needs[i]) != 1)
			return sbx_err_set(err, SBX_E_EXECUTION, 0,
					   "seccomp profile: init needs \"%s\", in no list",
					   sbx_sc_init_needs[i]);
	return 0;
}

/* ---- BPF ---- */

#ifndef SBX_SC_ARCH
/* No table for this architecture: refuse (sbx_seccomp_profile says why). */
struct sock_fprog *sbx_seccomp_compile(const char *const *deny, const char *const *allow,
				       sbx_err *err)
{
	size_t n;

	(void)sbx_seccomp_profile(deny, allow, &n, err);
	return NULL;
}

struct sock_fprog *sbx_seccomp_compile_setid(const char *const *deny, const char *const *allow,
					     bool no_setid, sbx_err *err)
{
	(void)no_setid;
	return sbx_seccomp_compile(deny, allow, err);
}
#else

/* Argument blocks: position-independent (jumps are relative), each ends
 * in a return.  The dispatch tree jumps to them by the syscall's number. */
/* clang-format off */
static const struct sock_filter blk_clone[] = {
	/* CLONE_NEWTIME (0x80) is not here: in clone() that bit is part of
	 * the exit signal; only unshare and clone3 take it, both refused. */
	LD(ARG_LO(0)),
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K,
		 CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
		 CLONE_NEWUTS | CLONE_NEWCGROUP, 0, 1),
	RET(RET_ERRNO(EPERM)),
	RET(RET_ALLOW),
};
static const struct sock_filter blk_ioctl[] = {
	/* TIOCSTI pushes input into a terminal (type commands into the
	 * host's shell); TIOCLINUX does the same on a VT. */
	LD(ARG_LO(1)),
	JEQ(TIOCSTI, 2, 0),
	JEQ(TIOCLINUX, 1, 0),
	RET(RET_ALLOW),
	RET(RET_ERRNO(EPERM)),
};
/* mknod of a character or block device; FIFOs, sockets and regular files
 * stay allowed (build tools make FIFOs).  mode is argument 1 of mknod and
 * 2 of mknodat. */
#define BLK_MKNOD(arg) {                  \
	LD(ARG_LO(arg)),                      \
	BPF_STMT(BPF_ALU | BPF_AND | BPF_K, S_IFMT), \
	JEQ(S_IFCHR, 2, 0),                   \
	JEQ(S_IFBLK, 1, 0),                   \
	RET(RET_ALLOW),                       \
	RET(RET_ERRNO(EPERM)),                \
}
static const struct sock_filter blk_mknod[] = BLK_MKNOD(1);
static const struct sock_filter blk_mknodat[] = BLK_MKNOD(2);
/* chmod, fchmod (mode: argument 1), fchmodat, fchmodat2 (argument 2):
 * no setuid or setgid bit. */
#define BLK_NO_SETID(arg) {                   \
	LD(ARG_LO(arg)),                          \
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, S_ISUID | S_ISGID, 0, 1), \
	RET(RET_ERRNO(EPERM)),                    \
	RET(RET_ALLOW),                           \
}
static const struct sock_filter blk_chmod[] = BLK_NO_SETID(1);
static const struct sock_filter blk_fchmodat[] = BLK_NO_SETID(2);
/* open (flags: argument 1, mode: 2), openat (2, 3): a mode that creates
 * (O_CREAT, O_TMPFILE) has no setuid or setgid bit. */
#define BLK_OPEN_NO_SETID(flags, mode) {      \
	LD(ARG_LO(flags)),                        \
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_CREAT | __O_TMPFILE, 0, 3), \
	LD(ARG_LO(mode)),                         \
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, S_ISUID | S_ISGID, 0, 1), \
	RET(RET_ERRNO(EPERM)),                    \
	RET(RET_ALLOW),                           \
}
static const struct sock_filter blk_open[] = BLK_OPEN_NO_SETID(1, 2);
static const struct sock_filter blk_openat[] = BLK_OPEN_NO_SETID(2, 3);
/* mknod's own rule (no devices) and no setuid or setgid bit. */
#define BLK_MKNOD_NO_SETID(arg) {         \
	LD(ARG_LO(arg)),                      \
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, S_ISUID | S_ISGID, 3, 0), \
	BPF_STMT(BPF_ALU | BPF_AND | BPF_K, S_IFMT), \
	JEQ(S_IFCHR, 1, 0),                   \
	JEQ(S_IFBLK, 0, 1),                   \
	RET(RET_ERRNO(EPERM)),                \
	RET(RET_ALLOW),                       \
}
static const struct sock_filter blk_mknod_nosetid[] = BLK_MKNOD_NO_SETID(1);
static const struct sock_filter blk_mknodat_nosetid[] = BLK_MKNOD_NO_SETID(2);
static const struct sock_filter blk_nosys[] = { RET(RET_ERRNO(ENOSYS)) };
static const struct sock_filter blk_personality[] = {
	/* Only PER_LINUX and the query: no READ_IMPLIES_EXEC, no
	 * ADDR_NO_RANDOMIZE, no other execution domain. */
	LD(ARG_LO(0)),
	JEQ(0 /* PER_LINUX */, 1, 0),
	JEQ(0xffffffffu, 0, 1),
	RET(RET_ALLOW),
	RET(RET_ERRNO(EPERM)),
};
static const struct sock_filter blk_socket[] = {
	/* Families a workload needs.  The rest answers EAFNOSUPPORT, as a
	 * kernel built without them would (AF_VSOCK is not namespaced: it
	 * reaches the hypervisor and the host VM's ports whatever the network
	 * mode).  Netlink only for NETLINK_ROUTE (ip addr, getifaddrs); the
	 * others, e.g. the host's uevents, answer EPROTONOSUPPORT. */
	LD(ARG_LO(0)),
	JEQ(AF_UNIX, 5, 0),
	JEQ(AF_INET, 4, 0),
	JEQ(AF_INET6, 3, 0),
	JEQ(AF_NETLINK, 0, 3),
	LD(ARG_LO(2)),
	JEQ(NETLINK_ROUTE, 0, 2),
	RET(RET_ALLOW),
	RET(RET_ERRNO(EAFNOSUPPORT)),
	RET(RET_ERRNO(EPROTONOSUPPORT)),
};
static const struct sock_filter blk_socketpair[] = {
	LD(ARG_LO(0)),
	JEQ(AF_UNIX, 0, 1),
	RET(RET_ALLOW),
	RET(RET_ERRNO(EAFNOSUPPORT)),
};
static const struct sock_filter blk_prlimit64[] = {
	/* A run changes its own limits only, never another process's (e.g.
	 * sbx-init's, which later runs would inherit). */
	LD(ARG_LO(0)),
	JEQ(0, 0, 1),
	RET(RET_ALLOW),
	RET(RET_ERRNO(EPERM)),
};
/* clang-format on */

static const struct {
	const struct sock_filter *insns;
	size_t len;
} sbx_blocks[] = {
	[SBX_SC_CLONE] = {blk_clone, N_OF(blk_clone)},
	[SBX_SC_IOCTL] = {blk_ioctl, N_OF(blk_ioctl)},
	[SBX_SC_MKNOD] = {blk_mknod, N_OF(blk_mknod)},
	[SBX_SC_MKNODAT] = {blk_mknodat, N_OF(blk_mknodat)},
	[SBX_SC_PERSONALITY] = {blk_personality, N_OF(blk_personality)},
	[SBX_SC_SOCKET] = {blk_socket, N_OF(blk_socket)},
	[SBX_SC_SOCKETPAIR] = {blk_socketpair, N_OF(blk_socketpair)},
	[SBX_SC_PRLIMIT64] = {blk_prlimit64, N_OF(blk_prlimit64)},
	[SBX_SC_CHMOD] = {blk_chmod, N_OF(blk_chmod)},
	[SBX_SC_FCHMODAT] = {blk_fchmodat, N_OF(blk_fchmodat)},
	[SBX_SC_OPEN] = {blk_open, N_OF(blk_open)},
	[SBX_SC_OPENAT] = {blk_openat, N_OF(blk_openat)},
	[SBX_SC_MKNOD_NOSETID] = {blk_mknod_nosetid, N_OF(blk_mknod_nosetid)},
	[SBX_SC_MKNODAT_NOSETID] = {blk_mknodat_nosetid, N_OF(blk_mknodat_nosetid)},
	[SBX_SC_NOSYS] = {blk_nosys, N_OF(blk_nosys)},
};

/* A run of numbers [start, next segment's start) with one answer: a
 * return value, or (block >= 0) an argument block. */
struct sbx_seg {
	uint32_t start;
	uint32_t ret;
	int block;
};

/* Append a segment, merging it into the previous one when they answer
 * alike. */
static void sbx_seg_add(struct sbx_seg *s, size_t *n, uint32_t start, uint32_t ret, int block)
{
	if (*n > 0 && s[*n - 1].block < 0 && block < 0 && s[*n - 1].ret == ret)
		return;
	s[*n].start = start;
	s[*n].ret = ret;
	s[*n].block = block;
	(*n)++;
}

/* Instructions the dispatch tree over segments [lo, hi] takes. */
static size_t sbx_tree_size(size_t lo, size_t hi)
{
	size_t mid, left;

	if (lo == hi)
		return 1;
	mid = lo + (hi - lo + 1) / 2;
	left = sbx_tree_size(lo, mid - 1);
	/* jge, plus a trampoline when the left side is out of a conditional
	 * jump's 8-bit reach */
	return 1 + (left > 255) + left + sbx_tree_size(mid, hi);
}

/* Emit the tree at out[*pc]: "nr >= start of the middle segment" splits
 * the segments in two halves until one is left, whose answer is a return
 * or a jump to its argument block (at block_at[]). */
static void sbx_tree_emit(struct sock_filter *out, size_t *pc, const struct sbx_seg *s, size_t lo,
			  size_t hi, const size_t *block_at)
{
	size_t mid, left;

	if (lo == hi) {
		if (s[lo].block < 0)
			out[*pc] = (struct sock_filter)RET(s[lo].ret);
		else
			out[*pc] = (struct sock_filter)BPF_JUMP(
				BPF_JMP | BPF_JA, (uint32_t)(block_at[s[lo].block] - *pc - 1), 0,
				0);
		(*pc)++;
		return;
	}
	mid = lo + (hi - lo + 1) / 2;
	left = sbx_tree_size(lo, mid - 1);
	if (left > 255) {
		out[(*pc)++] =
			(struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, s[mid].start, 0, 1);
		out[*pc] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, (uint32_t)left, 0, 0);
		(*pc)++;
	} else {
		out[(*pc)++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, s[mid].start,
							    (uint8_t)left, 0);
	}
	sbx_tree_emit(out, pc, s, lo, mid - 1, block_at);
	sbx_tree_emit(out, pc, s, mid, hi, block_at);
}

static int sbx_args_block(const char *name)
{
	size_t i;

	for (i = 0; i < N_OF(sbx_sc_args); i++)
		if (strcmp(sbx_sc_args[i].name, name) == 0)
			return (int)sbx_sc_args[i].id;
	return -1;
}

/* The setid guard's block of an allowed syscall, or -1. */
static int sbx_setid_block(const char *name)
{
	for (size_t i = 0; i < N_OF(sbx_sc_setid); i++)
		if (strcmp(sbx_sc_setid[i].name, name) == 0)
			return (int)sbx_sc_setid[i].id;
	return -1;
}

/* Is entry i one sbx-init needs although the workload's filter refuses
 * it: the mount calls of its scratch reset (seccomp_profile.h
 * sbx_sc_init_needs), and whatever the session's deny list narrowed (init
 * calls many of the allowed ones, and a policy may name any of them). */
static bool sbx_init_needs(const sbx_seccomp_entry *v, size_t i)
{
	return sbx_base_v[i].init_need ||
	       (sbx_base_v[i].e.action != SBX_SC_REFUSED && v[i].action == SBX_SC_REFUSED);
}

/* One program of the set (see sbx_seccomp_compile_setid): its segments,
 * the blocks they use and its length. */
struct sbx_stage {
	struct sbx_seg *seg;
	size_t nseg, len;
	size_t block_at[N_OF(sbx_blocks)]; /* 0: unused */
};

/* The answer of the whole filter for entry i (a return, or a block). */
static void sbx_answer(const sbx_seccomp_entry *v, size_t i, bool no_setid, uint32_t *ret,
		       int *block)
{
	*block = -1;
	*ret = 0;
	/* v is by table index, as sbx_base_v is (sbx_seccomp_profile). */
	if (v[i].action != SBX_SC_REFUSED && no_setid && sbx_base_v[i].setid_block >= 0)
		*block = sbx_base_v[i].setid_block;
	else if (v[i].action == SBX_SC_ALLOWED)
		*ret = RET_ALLOW;
	else if (v[i].action == SBX_SC_REFUSED)
		*ret = RET_ERRNO(v[i].err);
	else
		*block = sbx_base_v[i].args_block;
}

#define HEAD_LEN 4 /* the architecture check and the number load */

/* Lay out stage `which` of the profile v[0..n-1]: whole, init (init's needs
 * allowed) or run (init's needs only, as the whole filter answers them). */
static int sbx_stage_plan(struct sbx_stage *st, const sbx_seccomp_entry *v, size_t n, bool no_setid,
			  int which)
{
	uint32_t next = 0, gap = which == SBX_SC_STAGE_RUN ? RET_ALLOW : RET_ERRNO(ENOSYS);
	size_t i;

	memset(st, 0, sizeof(*st));
	/* At most: a gap and an entry per syscall, and the foreign ranges. */
	st->seg = calloc(2 * n + 3, sizeof(*st->seg));
	if (!st->seg)
		return -1;
	for (i = 0; i < n; i++) {
		uint32_t nr = (uint32_t)v[i].nr, ret;
		int block;

		if (nr > next)
			sbx_seg_add(st->seg, &st->nseg, next, gap, -1);
		sbx_answer(v, i, no_setid, &ret, &block);
		if (which != SBX_SC_WHOLE && sbx_init_needs(v, i) != (which == SBX_SC_STAGE_RUN))
			ret = RET_ALLOW, block = -1;
		sbx_seg_add(st->seg, &st->nseg, nr, ret, block);
		if (block >= 0)
			st->block_at[block] = 1;
		next = nr + 1;
	}
	sbx_seg_add(st->seg, &st->nseg, next, gap, -1);
	/* Other ABIs: the whole filter and the init stage kill, and every
	 * workload of a staged init is under the init stage. */
	sbx_seg_add(st->seg, &st->nseg, SBX_SC_FOREIGN_FROM,
		    which == SBX_SC_STAGE_RUN ? RET_ALLOW : RET_KILL, -1);
	sbx_seg_add(st->seg, &st->nseg, SBX_SC_FOREIGN_TO + 1, gap, -1);
	st->len = HEAD_LEN + sbx_tree_size(0, st->nseg - 1);
	for (i = 0; i < N_OF(sbx_blocks); i++)
		if (st->block_at[i]) {
			st->block_at[i] = st->len;
			st->len += sbx_blocks[i].len;
		}
	return 0;
}

/* Emit a planned stage at f (st->len instructions). */
static void sbx_stage_emit(struct sock_filter *f, const struct sbx_stage *st)
{
	static const struct sock_filter head[HEAD_LEN] = {
		LD(offsetof(struct seccomp_data, arch)),
		JEQ(SBX_SC_AUDIT_ARCH, 1, 0),
		RET(RET_KILL),
		LD(offsetof(struct seccomp_data, nr)),
	};
	size_t pc = HEAD_LEN;

	memcpy(f, head, sizeof(head));
	sbx_tree_emit(f, &pc, st->seg, 0, st->nseg - 1, st->block_at);
	for (size_t i = 0; i < N_OF(sbx_blocks); i++)
		if (st->block_at[i]) {
			memcpy(f + pc, sbx_blocks[i].insns, sbx_blocks[i].len * sizeof(*f));
			pc += sbx_blocks[i].len;
		}
}

/*
 * See sbx.h.  Called once per session, on the host side.  Each program's
 * layout: the architecture check, the number load, the dispatch tree, then
 * the argument blocks it uses.  One allocation holds the three programs'
 * headers (whole, init stage, run stage: sbx_seccomp_stage) and their
 * instructions.
 */
struct sock_fprog *sbx_seccomp_compile(const char *const *deny, const char *const *allow,
				       sbx_err *err)
{
	return sbx_seccomp_compile_setid(deny, allow, false, err);
}

struct sock_fprog *sbx_seccomp_compile_setid(const char *const *deny, const char *const *allow,
					     bool no_setid, sbx_err *err)
{
	struct sbx_stage st[SBX_SC_NSTAGES];
	struct sock_fprog *prog = NULL;
	struct sock_filter *f;
	sbx_seccomp_entry *v;
	size_t n, total = 0;
	int k;

	memset(st, 0, sizeof(st));
	v = sbx_seccomp_profile(deny, allow, &n, err);
	if (!v)
		return NULL;
	for (k = 0; k < SBX_SC_NSTAGES; k++) {
		if (sbx_stage_plan(&st[k], v, n, no_setid, k) < 0)
			goto nomem;
		if (st[k].len > BPF_MAXINSNS) {
			sbx_err_set(err, SBX_E_EXECUTION, 0,
				    "seccomp: the filter is too long (%zu)", st[k].len);
			goto out;
		}
		total += st[k].len;
	}
	prog = malloc(SBX_SC_NSTAGES * sizeof(*prog) + total * sizeof(*f));
	if (!prog)
		goto nomem;
	f = (struct sock_filter *)(prog + SBX_SC_NSTAGES);
	for (k = 0; k < SBX_SC_NSTAGES; k++) {
		sbx_stage_emit(f, &st[k]);
		prog[k].len = (unsigned short)st[k].len;
		prog[k].filter = f;
		f += st[k].len;
	}
	goto out;
nomem:
	sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "seccomp: out of memory");
out:
	for (k = 0; k < SBX_SC_NSTAGES; k++)
		free(st[k].seg);
	free(v);
	return prog;
}
#endif		   /* SBX_SC_ARCH */

/* See sbx.h. */
const struct sock_fprog *sbx_seccomp_stage(const struct sock_fprog *prog, int stage)
{
	return prog && stage > 0 && stage < SBX_SC_NSTAGES && prog[stage].len ? &prog[stage] : NULL;
}

/* Free a program from sbx_seccomp_compile (one block).  Safe on NULL. */
void sbx_seccomp_free(struct sock_fprog *prog)
{
	free(prog);
}

/*
 * Install prog on every thread of the calling process; see sbx.h.  Makes
 * no allocation (safe between fork/clone and execve).  Call it last,
 * right before execve: from here on the refused syscalls fail.
 */
int sbx_seccomp_install(const struct sock_fprog *prog, sbx_err *err)
{
	long rc;

	if (!prog)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "seccomp: no filter to install");
	/* no_new_privs is what lets a process without CAP_SYS_ADMIN install a
	 * filter, and it stops a setuid program from running privileged under
	 * a filter it was not written for.  Insist on it rather than rely on
	 * the workload holding CAP_SYS_ADMIN at this point. */
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
		return sbx_err_set(
			err, SBX_E_EXECUTION, EPERM,
			"seccomp: no_new_privs is not set; call prctl(PR_SET_NO_NEW_PRIVS, 1) before installing the filter");
	/* TSYNC: every thread of the process, not only the caller. */
	rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, prog);
	if (rc != 0) {
		int e = rc > 0 ? EBUSY : errno;

		if (rc > 0)
			return sbx_err_set(err, SBX_E_EXECUTION, e,
					   "seccomp: thread %ld could not take the filter", rc);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "seccomp: installing the filter: %s%s",
				   strerror(e),
				   e == EINVAL ? " (kernel without seccomp filters?)" : "");
	}
	return 0;
}
