/*
 * filter_budget.c: run a command with the seccomp filter budget used up.
 *
 *     filter_budget COMMAND [ARG...]
 *
 * The kernel refuses a filter (ENOMEM) once the filters on a task would
 * hold more than 32768 instructions in all (each counted with 4 more).
 * This stacks allow-all filters, the largest that still fit, until not
 * even one instruction does, then execs COMMAND, which inherits them: any
 * filter it or its children install fails.  Prints how many it stacked.
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct sock_filter insns[4096];

/* An allow-all filter of len instructions: 0, or -1 (errno). */
static int add(unsigned short len)
{
	struct sock_fprog p = {len, insns};

	for (unsigned short i = 0; i + 1 < len; i++)
		insns[i] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
							offsetof(struct seccomp_data, nr));
	insns[len - 1] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p);
}

int main(int argc, char **argv)
{
	int n = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: filter_budget COMMAND [ARG...]\n");
		return 2;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		perror("no_new_privs");
		return 1;
	}
	for (unsigned short len = 4096; len >= 1; len /= 2)
		while (add(len) == 0)
			n++;
	if (n == 0 || add(1) == 0) {
		fprintf(stderr, "filter_budget: the budget did not run out (%d filters)\n", n);
		return 1;
	}
	fprintf(stderr, "filter_budget: %d filters\n", n);
	execvp(argv[1], argv + 1);
	perror("exec");
	return 127;
}
