/*
 * spawn_peer.c: sbx-bench-peer, the baseline side of the exec latency
 * benchmark.  Runs an argv N times (fork + execvp + waitpid, or posix_spawn
 * with -s), each to completion, and prints the latency percentiles in ms on
 * one line that tests/bench/exec_latency.lua parses:
 *     n=2000 p50=0.412 p95=0.530 p99=0.701 min=0.350 max=1.920
 * With -c K each timed run starts K copies at once and waits for them all
 * (limits_bench.lua: the kernel's own cost of K namespace sets at once).
 * Any run that does not exit 0 aborts the measurement with exit status 1,
 * so a peer that cannot work here (no user namespaces for bwrap) is
 * reported as unavailable instead of timed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* -q: the command's stdout and stderr go here (ours stay). */
static int devnull = -1;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n-1]. */
static double percentile(const double *v, size_t n, double p)
{
	size_t rank = (size_t)ceil(p / 100.0 * (double)n);

	return v[rank ? rank - 1 : 0];
}

/* Start argv: its pid, or -1. */
static pid_t start_one(char **argv, bool use_spawn)
{
	pid_t pid;

	if (use_spawn) {
		posix_spawn_file_actions_t fa;
		int rc;

		posix_spawn_file_actions_init(&fa);
		if (devnull >= 0) {
			posix_spawn_file_actions_adddup2(&fa, devnull, STDOUT_FILENO);
			posix_spawn_file_actions_adddup2(&fa, devnull, STDERR_FILENO);
		}
		rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
		posix_spawn_file_actions_destroy(&fa);
		if (rc != 0) {
			fprintf(stderr, "sbx-bench-peer: posix_spawnp %s: %s\n", argv[0],
				strerror(rc));
			return -1;
		}
	} else {
		pid = fork();
		if (pid < 0) {
			perror("sbx-bench-peer: fork");
			return -1;
		}
		if (pid == 0) {
			if (devnull >= 0 &&
			    (dup2(devnull, STDOUT_FILENO) < 0 || dup2(devnull, STDERR_FILENO) < 0))
				_exit(126);
			execvp(argv[0], argv);
			_exit(127);
		}
	}
	return pid;
}

/* Wait for pid; 0 when it exited 0. */
static int wait_one(pid_t pid, const char *name)
{
	int status;

	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			perror("sbx-bench-peer: waitpid");
			return -1;
		}
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "sbx-bench-peer: %s failed (status 0x%x)\n", name, status);
		return -1;
	}
	return 0;
}

/* Run at_once copies of argv together to completion; 0 when all exited 0. */
static int run_once(char **argv, bool use_spawn, long at_once)
{
	pid_t pids[64];
	long started = 0;
	int rc = 0;

	for (; started < at_once; started++)
		if ((pids[started] = start_one(argv, use_spawn)) < 0) {
			rc = -1;
			break;
		}
	for (long i = 0; i < started; i++)
		if (wait_one(pids[i], argv[0]) < 0)
			rc = -1;
	return rc;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: sbx-bench-peer [-n RUNS] [-w WARMUP] [-c K] [-s] [-q] -- argv...\n"
		     "  -n RUNS    timed runs (default 2000)\n"
		     "  -w WARMUP  untimed runs first (default 50)\n"
		     "  -c K       start K copies at once per run, wait for all (1..64)\n"
		     "  -s         posix_spawnp instead of fork + execvp\n"
		     "  -q         the command's stdout and stderr go to /dev/null\n");
}

int main(int argc, char **argv)
{
	long runs = 2000, warmup = 50, at_once = 1;
	bool use_spawn = false, quiet = false;
	double *t;
	int opt;

	while ((opt = getopt(argc, argv, "+n:w:c:sqh")) != -1) {
		switch (opt) {
		case 'n':
			runs = strtol(optarg, NULL, 10);
			break;
		case 'w':
			warmup = strtol(optarg, NULL, 10);
			break;
		case 'c':
			at_once = strtol(optarg, NULL, 10);
			break;
		case 's':
			use_spawn = true;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc || runs < 1 || warmup < 0 || at_once < 1 || at_once > 64) {
		usage(stderr);
		return 2;
	}
	if (quiet) {
		devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (devnull < 0) {
			perror("sbx-bench-peer: /dev/null");
			return 1;
		}
	}
	t = calloc((size_t)runs, sizeof(*t));
	if (!t) {
		perror("sbx-bench-peer");
		return 1;
	}
	for (long i = 0; i < warmup; i++)
		if (run_once(argv + optind, use_spawn, at_once) < 0)
			return 1;
	for (long i = 0; i < runs; i++) {
		double t0 = now_ms();

		if (run_once(argv + optind, use_spawn, at_once) < 0)
			return 1;
		t[i] = now_ms() - t0;
	}
	qsort(t, (size_t)runs, sizeof(*t), cmp_double);
	printf("n=%ld p50=%.3f p95=%.3f p99=%.3f min=%.3f max=%.3f\n", runs,
	       percentile(t, (size_t)runs, 50), percentile(t, (size_t)runs, 95),
	       percentile(t, (size_t)runs, 99), t[0], t[runs - 1]);
	free(t);
	return 0;
}
