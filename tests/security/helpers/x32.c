/*
 * x32.c: make an x32-ABI syscall (number | __X32_SYSCALL_BIT) on x86_64.
 * The sandbox's filter must kill the process (SIGSYS) before the kernel
 * sees it; on a kernel without x32 support an unfiltered call fails with
 * ENOSYS.  Prints "RESULT x32 <outcome>" if it survives: "OK" if getpid
 * ran (the worst case), else the errno name.  Exits 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif

int main(void)
{
#if defined(__x86_64__)
	long rc;

	errno = 0;
	rc = syscall(__X32_SYSCALL_BIT | SYS_getpid);
	if (rc == -1) {
		const char *n = strerrorname_np(errno);

		printf("RESULT x32 %s\n", n ? n : "EUNKNOWN");
	} else {
		printf("RESULT x32 OK\n");
	}
#else
	printf("RESULT x32 unsupported\n");
#endif
	return 0;
}
