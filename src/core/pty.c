/*
 * pty.c: a run's pseudo-terminal (sbx_run_opts.pty_rows/pty_cols).
 *
 * The terminal is made inside the sandbox, never on the host: every run
 * mounts a devpts instance of its own over /dev/pts (rootfs.c), so its
 * /dev/ptmx (-> pts/ptmx) hands out terminals no other run and not the
 * host can see.  The workload opens the pair after the request came (it
 * already runs with every privilege dropped and seccomp on), makes the
 * slave its controlling terminal and stdio, and sends the master back to
 * the host over the socket the request carried in place of stdin
 * (SCM_RIGHTS).  The host checks that what came is a pty master before it
 * reads or writes it: a workload can send nothing else in its place.
 *
 * Backends without a mount namespace per run (none, bubblewrap) would use
 * the host's devpts: run.c refuses pty there (BackendUnavailable).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "internal.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

/* Workload side.  On failure errno is set and the caller reports it. */
int sbx_pty_open_inside(int sock, uint16_t rows, uint16_t cols, const char **what)
{
	struct winsize ws = {.ws_row = rows, .ws_col = cols};
	int unlock = 0, m, s;

	*what = "open /dev/ptmx";
	if ((m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0)
		return -1;
	*what = "unlock the pty";
	if (ioctl(m, TIOCSPTLCK, &unlock) != 0)
		goto fail;
	/* The slave by its master, not by a path another process could swap. */
	*what = "open the pty's slave";
	if ((s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0)
		goto fail;
	/* Above stdio, so the dup2s below cannot close it under us. */
	if (s < 3) {
		int t = fcntl(s, F_DUPFD_CLOEXEC, 3);
		close(s);
		if ((s = t) < 0)
			goto fail;
	}
	*what = "set the window size";
	if (ioctl(s, TIOCSWINSZ, &ws) != 0)
		goto fail_s;
	/* We are a session leader (setsid) without a terminal: this one
	 * becomes ours, and our process group its foreground group. */
	*what = "make the pty the controlling terminal";
	if (ioctl(s, TIOCSCTTY, 0) != 0)
		goto fail_s;
	*what = "send the pty to the host";
	if (sbx_proto_send_fds(sock, "m", 1, &m, 1) != 0)
		goto fail_s;
	close(m);
	*what = "pty stdio";
	for (int i = 0; i < 3; i++)
		if (dup2(s, i) < 0) {
			close(s);
			return -1;
		}
	close(s);
	return 0;
fail_s:
	close(s);
fail:
	close(m);
	return -1;
}

/* Host side: the master the workload sends on sock, checked, non-blocking.
 * Returns it; -2 when the workload ended without sending one (its status
 * record says why); -1 with err. */
int sbx_pty_recv_master(int sock, int timeout_ms, sbx_err *err)
{
	struct pollfd p = {sock, POLLIN, 0};
	char tag = 0;
	int fd = -1, n;
	size_t nfds = 0;
	unsigned int ptn;
	struct stat st;

	while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
		;
	if (n == 0)
		return sbx_err_set(err, SBX_E_EXECUTION, ETIMEDOUT,
				   "the sandbox did not hand over the run's pty within %d ms",
				   timeout_ms);
	ssize_t got = sbx_proto_recv_fds(sock, &tag, 1, &fd, 1, &nfds);
	if (got <= 0 && nfds == 0)
		return -2;
	/* Only a pty master (TIOCGPTN answers on masters alone) is read. */
	if (got != 1 || tag != 'm' || nfds != 1 || fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) ||
	    ioctl(fd, TIOCGPTN, &ptn) != 0) {
		if (nfds)
			close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, EPROTO,
				   "the sandbox sent something other than a pty master");
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

int sbx_pty_resize(int master, uint16_t rows, uint16_t cols, sbx_err *err)
{
	struct winsize ws = {.ws_row = rows, .ws_col = cols};

	/* The kernel sends SIGWINCH to the terminal's foreground group. */
	if (ioctl(master, TIOCSWINSZ, &ws) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "resize the pty: %s",
				   strerror(errno));
	return 0;
}

int sbx_pty_signal(int master, int signo)
{
	/* The master's TIOCSIG signals the slave's foreground process group,
	 * as the line discipline does for ^C, ^\ and ^Z. */
	return ioctl(master, TIOCSIG, signo);
}
