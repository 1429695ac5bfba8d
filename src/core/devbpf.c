/*
 * devbpf.c: the device allow-list of a cgroup v2 session, as a
 * BPF_PROG_TYPE_CGROUP_DEVICE program.
 *
 * cgroup v2 has no devices.allow/deny files: the kernel asks a BPF program
 * attached to the cgroup (type BPF_CGROUP_DEVICE) about every open/mknod of
 * a device node by a process in it.  We compile the rules into a straight
 * list of comparisons: for each rule, the device type, major, minor (unless
 * "*") and that the access asked for is within the rule's; the first match
 * allows (1), falling off the end denies (0).  The attachment holds the
 * program, so the fd is closed once attached; the program goes with the
 * cgroup.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define INSN(c, d, s, o, i) \
	((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define LDX_W(d, s, o) INSN(BPF_LDX | BPF_MEM | BPF_W, d, s, o, 0)
#define MOV_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define AND_IMM(d, i) INSN(BPF_ALU64 | BPF_AND | BPF_K, d, 0, 0, i)
#define RSH_IMM(d, i) INSN(BPF_ALU64 | BPF_RSH | BPF_K, d, 0, 0, i)
#define JNE_IMM(d, i, o) INSN(BPF_JMP | BPF_JNE | BPF_K, d, 0, o, i)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

int sbx_devbpf_parse(const char *text, struct sbx_devrule_view *out)
{
	char t, minor[16], acc[8];
	unsigned maj;

	if (sscanf(text, "%c %u:%15[0-9*] %7s", &t, &maj, minor, acc) != 4 ||
	    (t != 'c' && t != 'b') || strspn(acc, "rwm") != strlen(acc) || maj > 0xfff)
		return -1;
	out->type = t == 'c' ? BPF_DEVCG_DEV_CHAR : BPF_DEVCG_DEV_BLOCK;
	out->major = (int)maj;
	if (!strcmp(minor, "*"))
		out->minor = -1;
	else if (strspn(minor, "0123456789") == strlen(minor) && strlen(minor) < 8)
		out->minor = atoi(minor);
	else
		return -1;
	out->access = (strchr(acc, 'r') ? BPF_DEVCG_ACC_READ : 0) |
		      (strchr(acc, 'w') ? BPF_DEVCG_ACC_WRITE : 0) |
		      (strchr(acc, 'm') ? BPF_DEVCG_ACC_MKNOD : 0);
	return 0;
}

int sbx_devbpf_attach(const char *cgroup_dir, const char *const *rules, size_t n, sbx_err *err)
{
	/* 6 instructions of prologue, at most 10 per rule, 2 to deny. */
	size_t cap = 6 + 10 * n + 2, k = 0;
	struct bpf_insn *p = calloc(cap, sizeof(*p));
	char log[4096] = "";

	if (!p)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	/* r2 = access_type; r3 = type (low 16 bits); r4 = access (high 16);
	 * r5 = major; r7 = minor (struct bpf_cgroup_dev_ctx). */
	p[k++] = MOV_REG(BPF_REG_6, BPF_REG_1);
	p[k++] = LDX_W(BPF_REG_2, BPF_REG_6, 0);
	p[k++] = MOV_REG(BPF_REG_3, BPF_REG_2);
	p[k++] = AND_IMM(BPF_REG_3, 0xffff);
	p[k++] = MOV_REG(BPF_REG_4, BPF_REG_2);
	p[k++] = RSH_IMM(BPF_REG_4, 16);
	for (size_t i = 0; i < n; i++) {
		struct sbx_devrule_view r;
		if (sbx_devbpf_parse(rules[i], &r) < 0) {
			free(p);
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "device rule '%s': 'c MAJ:MIN rwm' expected", rules[i]);
		}
		/* One block per rule; every "no" jumps to the next block:
		 *   r5 = major; type != t? major != M? [r7 = minor; minor != m?]
		 *   r8 = access & ~allowed; r8 != 0?  r0 = 1; exit */
		int len = r.minor >= 0 ? 10 : 8, at = 0;
#define NEXT (len - at - 1)
		p[k++] = LDX_W(BPF_REG_5, BPF_REG_6, 4), at++;
		p[k++] = JNE_IMM(BPF_REG_3, r.type, NEXT), at++;
		p[k++] = JNE_IMM(BPF_REG_5, r.major, NEXT), at++;
		if (r.minor >= 0) {
			p[k++] = LDX_W(BPF_REG_7, BPF_REG_6, 8), at++;
			p[k++] = JNE_IMM(BPF_REG_7, r.minor, NEXT), at++;
		}
		p[k++] = MOV_REG(BPF_REG_8, BPF_REG_4), at++;
		p[k++] = AND_IMM(BPF_REG_8, ~r.access & 0x7), at++;
		p[k++] = JNE_IMM(BPF_REG_8, 0, NEXT), at++;
#undef NEXT
		p[k++] = MOV_IMM(BPF_REG_0, 1), at++;
		p[k++] = EXIT(), at++;
	}
	p[k++] = MOV_IMM(BPF_REG_0, 0);
	p[k++] = EXIT();

	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
	a.insns = (uint64_t)(uintptr_t)p;
	a.insn_cnt = (uint32_t)k;
	a.license = (uint64_t)(uintptr_t) "GPL";
	a.log_buf = (uint64_t)(uintptr_t)log;
	a.log_size = sizeof(log);
	a.log_level = 1;
	int prog = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof(a));
	int saved = errno;
	free(p);
	if (prog < 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, saved,
				   "cgroup v2 device filter: loading the BPF program failed: %s "
				   "(needs CAP_BPF/CAP_SYS_ADMIN)%s%.200s",
				   strerror(saved), log[0] ? ": " : "", log);
	int cg = open(cgroup_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg < 0) {
		saved = errno;
		close(prog);
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, saved, "open %s: %s", cgroup_dir,
				   strerror(saved));
	}
	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)cg;
	a.attach_bpf_fd = (uint32_t)prog;
	a.attach_type = BPF_CGROUP_DEVICE;
	int rc = (int)syscall(SYS_bpf, BPF_PROG_ATTACH, &a, sizeof(a));
	saved = errno;
	close(cg);
	close(prog);
	if (rc < 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, saved,
				   "cgroup v2 device filter: attaching the BPF program to %s: %s",
				   cgroup_dir, strerror(saved));
	return 0;
}
