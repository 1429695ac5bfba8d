/*
 * proxy_ca.c: the per-session CA of secret interception and the leaf
 * certificates it signs, one per intercepted host name.  EC P-256 keys:
 * making a CA costs about a millisecond, not an RSA key's tens.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "proxy_mitm.h"

struct sbx_proxy_ca {
	EVP_PKEY *key;
	X509 *cert;
	char *pem;
};

static int add_ext(X509 *x, X509 *issuer, int nid, const char *val)
{
	X509V3_CTX ctx;
	X509_EXTENSION *e;

	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
	if (!(e = X509V3_EXT_conf_nid(NULL, &ctx, nid, val)))
		return -1;
	int ok = X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	return ok ? 0 : -1;
}

/* A certificate for key, named cn, signed by signkey (issuer NULL: self). */
static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *signkey, bool ca,
		       const char *san)
{
	unsigned char rnd[16];
	X509 *x = X509_new();
	BIGNUM *bn = NULL;

	if (!x || RAND_bytes(rnd, sizeof(rnd)) != 1)
		goto fail;
	rnd[0] &= 0x7f; /* a positive serial */
	if (!(bn = BN_bin2bn(rnd, sizeof(rnd), NULL)) ||
	    !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || !X509_set_version(x, 2) ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), 30L * 86400) ||
	    !X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_UTF8,
					(const unsigned char *)cn, -1, -1, 0) ||
	    !X509_set_issuer_name(x, X509_get_subject_name(issuer ? issuer : x)) ||
	    !X509_set_pubkey(x, key))
		goto fail;
	if (ca) {
		if (add_ext(x, NULL, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
		    add_ext(x, NULL, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
		    add_ext(x, NULL, NID_subject_key_identifier, "hash") < 0 ||
		    add_ext(x, NULL, NID_authority_key_identifier, "keyid:always") < 0)
			goto fail;
	} else if (add_ext(x, issuer, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
		   add_ext(x, issuer, NID_key_usage, "critical,digitalSignature") < 0 ||
		   add_ext(x, issuer, NID_ext_key_usage, "serverAuth") < 0 ||
		   add_ext(x, issuer, NID_subject_alt_name, san) < 0 ||
		   add_ext(x, issuer, NID_authority_key_identifier, "keyid:always") < 0) {
		goto fail;
	}
	if (!X509_sign(x, signkey, EVP_sha256()))
		goto fail;
	BN_free(bn);
	return x;
fail:
	BN_free(bn);
	X509_free(x);
	return NULL;
}

sbx_proxy_ca *sbx_proxy_ca_new(const char *label, sbx_err *err)
{
	sbx_proxy_ca *ca = calloc(1, sizeof(*ca));
	char cn[128];
	BIO *b = NULL;
	BUF_MEM *m;

	snprintf(cn, sizeof(cn), "sbx session CA %s", label ? label : "");
	if (!ca || !(ca->key = EVP_EC_gen("P-256")) ||
	    !(ca->cert = make_cert(ca->key, cn, NULL, ca->key, true, NULL)) ||
	    !(b = BIO_new(BIO_s_mem())) || !PEM_write_bio_X509(b, ca->cert)) {
		BIO_free(b);
		sbx_proxy_ca_free(ca);
		ERR_clear_error();
		sbx_err_set(err, SBX_E_EXECUTION, 0, "secrets: cannot make the session CA");
		return NULL;
	}
	BIO_get_mem_ptr(b, &m);
	ca->pem = strndup(m->data, m->length);
	BIO_free(b);
	if (!ca->pem) {
		sbx_proxy_ca_free(ca);
		sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "secrets: out of memory");
		return NULL;
	}
	return ca;
}

const char *sbx_proxy_ca_pem(const sbx_proxy_ca *ca)
{
	return ca ? ca->pem : NULL;
}

void sbx_proxy_ca_free(sbx_proxy_ca *ca)
{
	if (!ca)
		return;
	EVP_PKEY_free(ca->key);
	X509_free(ca->cert);
	free(ca->pem);
	free(ca);
}

void sbx_proxy_ca_ref(const sbx_proxy_ca *ca, EVP_PKEY **key, X509 **cert)
{
	EVP_PKEY_up_ref(ca->key);
	X509_up_ref(ca->cert);
	*key = ca->key;
	*cert = ca->cert;
}

X509 *sbx_proxy_ca_leaf(EVP_PKEY *cakey, X509 *cacert, EVP_PKEY *leafkey, const char *host)
{
	char san[300];
	unsigned char a[16];
	bool ip = inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;

	snprintf(san, sizeof(san), "%s:%s", ip ? "IP" : "DNS", host);
	X509 *x = make_cert(leafkey, host, cacert, cakey, false, san);
	ERR_clear_error();
	return x;
}
