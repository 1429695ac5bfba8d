/*
 * test_asan_dtls.c: LeakSanitizer survives a dynamic TLS block that starts
 * 16 bytes into a page (src/sanitize/asan_defaults.c says why it did not).
 *
 * A child dlopens tests/unit/dtls_module.c and lays out the heap so that
 * the next 16-byte malloc chunk starts 16 bytes into a page (ASan hands
 * out a fresh size class run in ascending order, 32 bytes apart), then
 * touches the module's TLS variable: glibc mallocs its block there.  The
 * child checks the block's address (the test's premise) and exits, and
 * LeakSanitizer runs.  Control: with ASAN_OPTIONS=intercept_tls_get_addr=1
 * the same child dies in LSan's tracer; with the build's defaults it exits
 * 0.  Skipped outside the sanitizer build (make test-build).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

enum { GROOM_MAX = 1 << 16, NOT_GROOMED = 3, NO_MODULE = 4 };

#ifdef DTLS_MODULE
/* The child: prints "groomed" once the TLS block sits where the
 * interceptor misreads it, then exits through LeakSanitizer. */
static int child(void)
{
	void *h = dlopen(DTLS_MODULE, RTLD_NOW);
	void *(*addr)(void) = h ? (void *(*)(void))dlsym(h, "sbx_test_dtls_addr") : NULL;
	if (!addr) {
		fprintf(stderr, "dlopen %s: %s\n", DTLS_MODULE, dlerror());
		return NO_MODULE;
	}
	void **chunks = calloc(GROOM_MAX, sizeof(*chunks));
	int n = 0;
	uintptr_t last = 0;
	while (chunks && n < GROOM_MAX) {
		uintptr_t p = (uintptr_t)(chunks[n++] = malloc(16));
		if (last && p == last + 32 && (p + 32) % 4096 == 16)
			break;
		last = p;
	}
	uintptr_t tls = (uintptr_t)addr();
	for (int i = 0; i < n; i++)
		free(chunks[i]);
	free(chunks);
	if (tls % 4096 != 16) {
		fprintf(stderr, "the TLS block is at %#lx, not 16 bytes into a page\n",
			(unsigned long)tls);
		return NOT_GROOMED;
	}
	printf("groomed\n");
	fflush(stdout);
	return 0;
}

/* Runs the child with ASAN_OPTIONS=asan (NULL: unset); its output in out. */
static int run_child(const char *asan, char *out, size_t cap)
{
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		if (asan)
			setenv("ASAN_OPTIONS", asan, 1);
		else
			unsetenv("ASAN_OPTIONS");
		execl("/proc/self/exe", "test_asan_dtls", "--child", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	size_t len = 0;
	ssize_t r;
	while (len + 1 < cap && (r = read(fds[0], out + len, cap - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = '\0';
	close(fds[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void interceptor_on_crashes_the_tracer(void **state)
{
	(void)state;
	char out[16384];
	int rc = run_child("intercept_tls_get_addr=1", out, sizeof(out));
	print_message("%s", out);
	assert_non_null(strstr(out, "groomed"));
	assert_non_null(strstr(out, "LeakSanitizer has encountered a fatal error"));
	assert_int_not_equal(rc, 0);
}

static void build_defaults_keep_lsan_working(void **state)
{
	(void)state;
	char out[16384];
	int rc = run_child(NULL, out, sizeof(out));
	print_message("%s", out);
	assert_non_null(strstr(out, "groomed"));
	assert_null(strstr(out, "LeakSanitizer"));
	assert_int_equal(rc, 0);
}
#else
static void interceptor_on_crashes_the_tracer(void **state)
{
	(void)state;
	skip();
}

static void build_defaults_keep_lsan_working(void **state)
{
	(void)state;
	skip();
}
#endif

int main(int argc, char **argv)
{
#ifdef DTLS_MODULE
	if (argc == 2 && strcmp(argv[1], "--child") == 0)
		return child();
#else
	(void)argc;
	(void)argv;
#endif
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(interceptor_on_crashes_the_tracer),
		cmocka_unit_test(build_defaults_keep_lsan_working),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
