/*
 * auth.c: bearer tokens.  The token file has one "TOKEN TENANT" per line
 * ('#' comments and blank lines skipped).  A presented token is compared
 * with every entry in constant time (no early exit, time depends only on
 * the lengths), so timing tells nothing about which prefix matched.
 * Tokens are never logged.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

bool sbx_srv_ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	volatile unsigned char diff = (unsigned char)(alen != blen);
	size_t n = alen < blen ? alen : blen;

	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0;
}

int sbx_srv_auth_load(sbx_srv *S, const char *path, sbx_err *err)
{
	FILE *f = fopen(path, "re");
	char line[1024];
	unsigned lineno = 0;

	if (!f)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, errno, "--token-file %s: %s", path,
				   strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *tok, *ten, *save = NULL;
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fclose(f);
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "%s:%u: line too long",
					   path, lineno);
		}
		tok = strtok_r(line, " \t\r\n", &save);
		if (!tok || tok[0] == '#')
			continue;
		ten = strtok_r(NULL, " \t\r\n", &save);
		if (!ten || strtok_r(NULL, " \t\r\n", &save)) {
			fclose(f);
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "%s:%u: expected \"TOKEN TENANT\"", path, lineno);
		}
		if (strlen(tok) < 16) {
			fclose(f);
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "%s:%u: token shorter than 16 characters", path, lineno);
		}
		for (const char *p = ten; *p; p++)
			if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') {
				fclose(f);
				return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
						   "%s:%u: tenant names use [A-Za-z0-9._-]", path,
						   lineno);
			}
		sbx_srv_token *nt = realloc(S->tokens, (S->n_tokens + 1) * sizeof(*nt));
		if (!nt) {
			fclose(f);
			return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
		}
		S->tokens = nt;
		nt[S->n_tokens].token = strdup(tok);
		nt[S->n_tokens].len = strlen(tok);
		nt[S->n_tokens].tenant = strdup(ten);
		S->n_tokens++;
	}
	fclose(f);
	if (S->n_tokens == 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "%s: no tokens", path);
	return 0;
}

const char *sbx_srv_auth_tenant(const sbx_srv *S, const char *token, size_t len)
{
	const char *found = NULL;

	for (size_t i = 0; i < S->n_tokens; i++) {
		bool eq = sbx_srv_ct_equal(token, len, S->tokens[i].token, S->tokens[i].len);
		found = eq ? S->tokens[i].tenant : found;
	}
	return found;
}

void sbx_srv_auth_free(sbx_srv *S)
{
	for (size_t i = 0; i < S->n_tokens; i++) {
		explicit_bzero(S->tokens[i].token, S->tokens[i].len);
		free(S->tokens[i].token);
		free(S->tokens[i].tenant);
	}
	free(S->tokens);
	S->tokens = NULL;
	S->n_tokens = 0;
}
