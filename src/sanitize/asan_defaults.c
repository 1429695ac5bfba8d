/*
 * asan_defaults.c: the AddressSanitizer option defaults every program of
 * the sanitizer build (SBX_SANITIZE: make test-build) starts with.  Linked
 * into each executable of that build only; ASAN_OPTIONS still overrides.
 *
 * intercept_tls_get_addr=0: the __tls_get_addr interceptor of GCC 12's
 * libasan (Debian 12's libasan8; LLVM before 17) guesses a dynamic TLS
 * block's extent from a pre-2.25 glibc header it assumes is there whenever
 * the block starts 16 bytes into a page.  Since glibc 2.25 a block is a
 * plain malloc chunk, and an ASan chunk lands there by chance (1 in 128
 * for the 16-byte TLS of libgnutls, which libcurl brings in): the two words
 * before it are then read as an address and a length, and LeakSanitizer's
 * stop-the-world tracer segfaults scanning that range at exit ("Tracer
 * caught signal 11", exit 1, no leak named).  google/sanitizers#1322
 * (also #1267, #914); fixed upstream by LLVM's "Fix tls_get_addr handling
 * for glibc >=2.25" (D147459, LLVM 17).  With this glibc the interceptor
 * gives every other block size 0 ("Can't guess glibc version"), so turning
 * it off loses no scanning: the blocks are malloc chunks LeakSanitizer
 * reaches through the thread's dtv anyway.  tests/unit/test_asan_dtls.c
 * reproduces the crash with the interceptor on and shows it gone.
 */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SBX_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(SBX_ASAN)
const char *__asan_default_options(void);

const char *__asan_default_options(void)
{
	return "intercept_tls_get_addr=0";
}
#endif
