/*
 * posture.c: print the security posture the workload runs with, as seen
 * from inside: one "RESULT <name> <value>" line each for
 *   NoNewPrivs Seccomp Seccomp_filters CapInh CapPrm CapEff CapBnd CapAmb
 *     (the values of those /proc/self/status fields, "missing" if absent),
 *   uid gid euid egid (numbers), groups (comma-separated, "none" if empty),
 *   fds (the open fds besides the one reading /proc/self/fd, comma-separated).
 * Exits 0.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const fields[] = {
	"NoNewPrivs", "Seccomp", "Seccomp_filters", "CapInh",
	"CapPrm",     "CapEff",	 "CapBnd",	    "CapAmb",
};

static void status_fields(void)
{
	char line[512], values[sizeof(fields) / sizeof(fields[0])][128];
	FILE *f = fopen("/proc/self/status", "r");
	size_t i;

	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		strcpy(values[i], "missing");
	while (f && fgets(line, sizeof(line), f)) {
		for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
			size_t n = strlen(fields[i]);

			if (strncmp(line, fields[i], n) == 0 && line[n] == ':')
				sscanf(line + n + 1, " %127s", values[i]);
		}
	}
	if (f)
		fclose(f);
	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		printf("RESULT %s %s\n", fields[i], values[i]);
}

static void ids(void)
{
	gid_t groups[256];
	int n = getgroups(256, groups), i;

	printf("RESULT uid %u\nRESULT gid %u\n", (unsigned)getuid(), (unsigned)getgid());
	printf("RESULT euid %u\nRESULT egid %u\n", (unsigned)geteuid(), (unsigned)getegid());
	printf("RESULT groups ");
	if (n <= 0)
		printf("none");
	for (i = 0; i < n; i++)
		printf("%s%u", i ? "," : "", (unsigned)groups[i]);
	printf("\n");
}

static void fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int first = 1;

	printf("RESULT fds ");
	if (!d) {
		printf("unknown\n");
		return;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		printf("%s%s", first ? "" : ",", e->d_name);
		first = 0;
	}
	closedir(d);
	printf("%s\n", first ? "none" : "");
}

int main(void)
{
	status_fields();
	ids();
	fds();
	return 0;
}
