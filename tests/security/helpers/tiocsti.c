/*
 * tiocsti.c: try to push a character into a terminal's input queue with
 * TIOCSTI (and the VT's TIOCLINUX), the classic way out of a sandbox that
 * shares the host's terminal: the pushed bytes are read by the host shell.
 *
 * Attempts, one "RESULT <name> <outcome>" line each (outcome "OK" or an
 * errno name; "open-<errno>" when /dev/tty cannot be opened):
 *   tiocsti_stdin      ioctl(0, TIOCSTI)
 *   tiocsti_stdin_high the same with junk in the request's upper 32 bits
 *                      (the kernel ignores them; the filter must too)
 *   tioclinux_stdin    ioctl(0, TIOCLINUX, subcode 2 = set selection: bad arg)
 *   tiocsti_tty        ioctl(open("/dev/tty"), TIOCSTI)
 * The byte pushed is a NUL, so even a success types nothing visible.  Exits 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "probe_report.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

int main(void)
{
	char c = '\0';
	long rc;
	int fd;

	errno = 0;
	rc = syscall(SYS_ioctl, 0, TIOCSTI, &c);
	report("tiocsti_stdin", rc, errno);
	errno = 0;
	rc = syscall(SYS_ioctl, 0, 0xdead00000000ul | TIOCSTI, &c);
	report("tiocsti_stdin_high", rc, errno);
	errno = 0;
	rc = syscall(SYS_ioctl, 0, TIOCLINUX, "\x02");
	report("tioclinux_stdin", rc, errno);

	fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		const char *n = strerrorname_np(errno);

		printf("RESULT tiocsti_tty open-%s\n", n ? n : "EUNKNOWN");
		return 0;
	}
	errno = 0;
	rc = syscall(SYS_ioctl, fd, TIOCSTI, &c);
	report("tiocsti_tty", rc, errno);
	close(fd);
	return 0;
}
