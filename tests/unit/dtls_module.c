/*
 * dtls_module.c: a shared object whose thread-local variable lives in
 * dynamic TLS once dlopened (test_asan_dtls.c: glibc mallocs the block at
 * the first access, through __tls_get_addr).
 */
void *sbx_test_dtls_addr(void);

static __thread long var[2];

void *sbx_test_dtls_addr(void)
{
	return &var[0];
}
