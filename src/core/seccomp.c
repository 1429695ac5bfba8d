/*
 * seccomp.c: the syscall filter every workload runs under.
 *
 * The filter is built once per session with libseccomp and exported to a
 * plain BPF program, so starting a run costs one seccomp() call and no
 * allocation.  Its shape:
 *
 *   - default ALLOW: the sandbox is a general-purpose Linux box, and the
 *     namespaces, uid and capability drop are what confine it; the filter
 *     removes the kernel attack surface those do not cover (the classes
 *     Docker's default profile refuses) plus what the session adds;
 *   - refused syscalls fail with EPERM, so programs see an ordinary error;
 *   - only the native ABI is allowed: any other architecture (i386 through
 *     int 0x80, and x32, whose numbers carry bit 0x40000000 on x86_64 and
 *     which libseccomp sends to the bad-arch action) kills the process,
 *     because a second syscall table would be a second, unfiltered door.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbx.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

/*
 * Refused outright (EPERM).  Names this architecture does not know are
 * skipped: they cannot be called here anyway.
 */
/* clang-format off */
static const char *const sbx_baseline_deny[] = {
	/* keyrings: not namespaced */
	"add_key", "request_key", "keyctl",
	/* kernel programmability and introspection */
	"bpf", "perf_event_open", "userfaultfd", "fanotify_init", "lookup_dcookie",
	/* kernel modules and kexec */
	"init_module", "finit_module", "delete_module", "create_module",
	"get_kernel_syms", "query_module", "kexec_load", "kexec_file_load",
	/* mounts: the sandbox's tree is fixed by the time it runs */
	"mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig",
	"fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	/* machine-wide state */
	"swapon", "swapoff", "acct", "syslog", "reboot", "settimeofday", "stime",
	"clock_settime", "clock_adjtime", "adjtimex", "sethostname",
	"setdomainname", "iopl", "ioperm", "modify_ldt", "quotactl", "quotactl_fd",
	"nfsservctl", "vhangup", "uselib", "ustat", "sysfs", "_sysctl",
	/* other processes and file handles that bypass paths */
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"open_by_handle_at", "name_to_handle_at",
	/* io_uring runs syscalls the filter never sees */
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	/* namespaces: no new ones, no joining others */
	"setns", "unshare",
	/* NUMA placement: Docker refuses it; a sandbox has no use for it */
	"get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "mbind",
	"migrate_pages", "move_pages",
	NULL,
};
/* clang-format on */

#define SBX_DENY SCMP_ACT_ERRNO(EPERM)

static int sbx_scmp_fail(sbx_err *err, int rc, const char *what)
{
	return sbx_err_set(err, SBX_E_EXECUTION, -rc, "seccomp: %s: %s", what, strerror(-rc));
}

/* true when name is in the NULL-terminated list. */
static bool sbx_listed(const char *const *list, const char *name)
{
	for (; list && *list; list++)
		if (strcmp(*list, name) == 0)
			return true;
	return false;
}

/*
 * The syscalls refused only for some arguments.  libseccomp compares one
 * argument once per rule, and a rule matches when all its comparisons do,
 * so "any of these bits" is one rule per bit.  A syscall the caller denies
 * entirely is skipped here: the unconditional rule covers it.
 */
static int sbx_add_conditional(scmp_filter_ctx ctx, const char *const *extra, sbx_err *err)
{
	static const uint64_t ns_flags[] = {
		CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,    CLONE_NEWNET,
		CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP,
	};
	int rc;
	size_t i;

	/* clone with any namespace flag.  arg0 is the flags on x86_64 and
	 * arm64 (the raw clone's argument order differs only in later args).
	 * CLONE_NEWTIME (0x80) is not here: in clone() that bit is part of the
	 * exit signal; only unshare and clone3 take it, both refused. */
	if (!sbx_listed(extra, "clone")) {
		for (i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
			rc = seccomp_rule_add(
				ctx, SBX_DENY, SCMP_SYS(clone), 1,
				SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
			if (rc < 0)
				return sbx_scmp_fail(err, rc, "clone rule");
		}
	}
	/* clone3 passes its flags in a struct BPF cannot read.  ENOSYS makes
	 * glibc (2.34+) fall back to clone, which the rule above checks. */
	if (!sbx_listed(extra, "clone3")) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
		if (rc < 0)
			return sbx_scmp_fail(err, rc, "clone3 rule");
	}
	/* ioctl TIOCSTI (push input into the terminal, i.e. type commands into
	 * the host's shell) and TIOCLINUX (the same on a VT).  The kernel reads
	 * the request as 32 bits, so only the low 32 are compared: junk in the
	 * upper half must not slip past. */
	if (!sbx_listed(extra, "ioctl")) {
		rc = seccomp_rule_add(ctx, SBX_DENY, SCMP_SYS(ioctl), 1,
				      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SBX_DENY, SCMP_SYS(ioctl), 1,
					      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX));
		if (rc < 0)
			return sbx_scmp_fail(err, rc, "ioctl rule");
	}
	/* mknod of a character or block device.  FIFOs, sockets and regular
	 * files stay allowed (build tools make FIFOs). */
	if (!sbx_listed(extra, "mknod")) {
		rc = seccomp_rule_add(ctx, SBX_DENY, SCMP_SYS(mknod), 1,
				      SCMP_A1(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFCHR));
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SBX_DENY, SCMP_SYS(mknod), 1,
					      SCMP_A1(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFBLK));
		if (rc < 0)
			return sbx_scmp_fail(err, rc, "mknod rule");
	}
	if (!sbx_listed(extra, "mknodat")) {
		rc = seccomp_rule_add(ctx, SBX_DENY, SCMP_SYS(mknodat), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFCHR));
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SBX_DENY, SCMP_SYS(mknodat), 1,
					      SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFBLK));
		if (rc < 0)
			return sbx_scmp_fail(err, rc, "mknodat rule");
	}
	/* personality: only PER_LINUX (0) and the query 0xffffffff.  The kernel
	 * reads 32 bits; "not all equal" is "some bit i set while bit i+1
	 * (cyclically) is clear", one masked compare per i. */
	if (!sbx_listed(extra, "personality")) {
		for (i = 0; i < 32; i++) {
			uint64_t bit = 1ull << i, next = 1ull << ((i + 1) % 32);

			rc = seccomp_rule_add(ctx, SBX_DENY, SCMP_SYS(personality), 1,
					      SCMP_A0(SCMP_CMP_MASKED_EQ, bit | next, bit));
			if (rc < 0)
				return sbx_scmp_fail(err, rc, "personality rule");
		}
	}
	return 0;
}

/* Export the compiled filter into one malloc'd block: the sock_fprog
 * followed by its instructions. */
static struct sock_fprog *sbx_export(scmp_filter_ctx ctx, sbx_err *err)
{
	struct sock_fprog *prog = NULL;
	off_t size;
	size_t n;
	int fd, rc;

	fd = memfd_create("sbx-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "seccomp: memfd_create: %s",
			    strerror(errno));
		return NULL;
	}
	rc = seccomp_export_bpf(ctx, fd);
	if (rc < 0) {
		sbx_scmp_fail(err, rc, "export");
		goto out;
	}
	size = lseek(fd, 0, SEEK_END);
	if (size <= 0 || size % sizeof(struct sock_filter) != 0 ||
	    size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		sbx_err_set(err, SBX_E_EXECUTION, 0,
			    "seccomp: exported filter has a bad size (%jd bytes)", (intmax_t)size);
		goto out;
	}
	n = (size_t)size / sizeof(struct sock_filter);
	prog = malloc(sizeof(*prog) + (size_t)size);
	if (!prog) {
		sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "seccomp: out of memory");
		goto out;
	}
	prog->len = (unsigned short)n;
	prog->filter = (struct sock_filter *)(prog + 1);
	if (pread(fd, prog->filter, (size_t)size, 0) != size) {
		sbx_err_set(err, SBX_E_EXECUTION, errno,
			    "seccomp: reading the exported filter failed");
		free(prog);
		prog = NULL;
	}
out:
	close(fd);
	return prog;
}

/*
 * See sbx.h.  A name in extra_deny that libseccomp does not know at all is
 * InvalidArgument; a name it knows for other architectures only (e.g.
 * "socketcall" on x86_64) is accepted and refuses nothing, so one policy
 * can serve several architectures.  Names the baseline already refuses
 * are accepted too.  Called once per session, on the host side.
 */
struct sock_fprog *sbx_seccomp_compile(const char *const *extra_deny, sbx_err *err)
{
	struct sock_fprog *prog = NULL;
	const char *const *p;
	scmp_filter_ctx ctx;
	int rc, nr;

	/* Check the caller's names before building anything. */
	for (p = extra_deny; p && *p; p++) {
		if (!**p || seccomp_syscall_resolve_name(*p) == __NR_SCMP_ERROR) {
			sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				    "seccomp_deny: unknown syscall \"%.64s\"", *p);
			return NULL;
		}
	}

	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "seccomp: seccomp_init failed");
		return NULL;
	}
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc < 0) {
		sbx_scmp_fail(err, rc, "bad-arch action");
		goto out;
	}
	/* A binary tree instead of a linear scan: every allowed syscall pays
	 * for the lookup, so keep it short.  Old libseccomp lacks it: fine. */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);

	for (p = sbx_baseline_deny; *p; p++) {
		/* Negative numbers are libseccomp's pseudo-syscalls: names that
		 * exist on other architectures only. */
		nr = seccomp_syscall_resolve_name(*p);
		if (nr < 0)
			continue;
		rc = seccomp_rule_add(ctx, SBX_DENY, nr, 0);
		if (rc < 0) {
			sbx_scmp_fail(err, rc, *p);
			goto out;
		}
	}
	for (p = extra_deny; p && *p; p++) {
		nr = seccomp_syscall_resolve_name(*p);
		if (nr < 0 || sbx_listed(sbx_baseline_deny, *p))
			continue; /* not on this arch, or refused already */
		rc = seccomp_rule_add(ctx, SBX_DENY, nr, 0);
		if (rc < 0) {
			sbx_scmp_fail(err, rc, *p);
			goto out;
		}
	}
	if (sbx_add_conditional(ctx, extra_deny, err) < 0)
		goto out;
	prog = sbx_export(ctx, err);
out:
	seccomp_release(ctx);
	return prog;
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
