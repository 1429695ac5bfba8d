/*
 * test_path.c: sbx_path_check, the gate every caller-supplied path of
 * put_bytes / get_bytes / cwd goes through before any resolution.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sbx.h"

static void assert_ok(const char *path)
{
	sbx_err err = {0};

	if (sbx_path_check(path, strlen(path), &err) != 0)
		fail_msg("\"%s\" refused: %s", path, err.msg);
}

/* Refused as InvalidArgument with a message containing `why`. */
static void assert_refused_len(const char *path, size_t len, const char *why)
{
	sbx_err err = {0};

	assert_int_equal(sbx_path_check(path, len, &err), -1);
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
	if (!strstr(err.msg, why))
		fail_msg("message \"%s\" does not say \"%s\"", err.msg, why);
}

static void assert_refused(const char *path, const char *why)
{
	assert_refused_len(path, strlen(path), why);
}

static void test_plain_paths_pass(void **state)
{
	(void)state;
	assert_ok("a");
	assert_ok("a.txt");
	assert_ok("dir/sub/file");
	assert_ok("./a");
	assert_ok("a/./b");
	assert_ok("a//b");
	assert_ok("a/");
	assert_ok(".");
	assert_ok("...");
	assert_ok("..a");
	assert_ok("a..");
	assert_ok(".hidden/..x/y..");
}

static void test_empty_refused(void **state)
{
	sbx_err err = {0};

	(void)state;
	assert_refused("", "empty");
	assert_int_equal(sbx_path_check(NULL, 0, &err), -1);
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
}

static void test_absolute_refused(void **state)
{
	(void)state;
	assert_refused("/etc/passwd", "absolute");
	assert_refused("/", "absolute");
	assert_refused("//x", "absolute");
}

static void test_dotdot_refused(void **state)
{
	(void)state;
	assert_refused("..", "'..'");
	assert_refused("../x", "'..'");
	assert_refused("a/..", "'..'");
	assert_refused("a/../b", "'..'");
	assert_refused("a/b/../../..", "'..'");
	assert_refused("a//..//b", "'..'");
	assert_refused("./..", "'..'");
}

static void test_nul_refused(void **state)
{
	static const char with_nul[] = "ok.txt\0/../../etc/passwd";

	(void)state;
	/* A Lua string carries its length; a C check that stops at the NUL
	 * would pass "ok.txt" and the rest would be silently dropped. */
	assert_refused_len(with_nul, sizeof(with_nul) - 1, "NUL");
	assert_refused_len("\0", 1, "NUL");
	assert_refused_len("a\0", 2, "NUL");
}

static void test_long_component(void **state)
{
	char name[NAME_MAX + 2];

	(void)state;
	memset(name, 'x', NAME_MAX);
	name[NAME_MAX] = '\0';
	assert_ok(name);
	memset(name, 'x', NAME_MAX + 1);
	name[NAME_MAX + 1] = '\0';
	assert_refused(name, "NAME_MAX");
}

static void test_long_total(void **state)
{
	char path[PATH_MAX + 1];
	size_t i;

	(void)state;
	/* "xxxx/xxxx/..." of exactly PATH_MAX - 1 bytes passes... */
	for (i = 0; i < PATH_MAX - 1; i++)
		path[i] = (i % 100 == 99) ? '/' : 'x';
	path[PATH_MAX - 1] = '\0';
	assert_ok(path);
	/* ...one byte more does not. */
	path[PATH_MAX - 1] = 'x';
	path[PATH_MAX] = '\0';
	assert_refused(path, "limit is 4095");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_paths_pass), cmocka_unit_test(test_empty_refused),
		cmocka_unit_test(test_absolute_refused), cmocka_unit_test(test_dotdot_refused),
		cmocka_unit_test(test_nul_refused),	 cmocka_unit_test(test_long_component),
		cmocka_unit_test(test_long_total),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
