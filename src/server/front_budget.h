/*
 * front_budget.h: budgets of the front that outlive a connection.  A
 * client that is cut for abuse and reconnects must not get a fresh
 * budget: streams it resets before h2o answered them are charged to a
 * principal (its tenant once authenticated, else its source address) in
 * one token bucket shared by all its connections; a principal that spends
 * it cools down (its requests close their connection) for a while.  Pure
 * (no I/O, no clock of its own); the front's thread alone uses it.
 */
#ifndef SBX_FRONT_BUDGET_H
#define SBX_FRONT_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "h2guard.h"

typedef struct sbx_fb sbx_fb;

/* rate: resets before an answer per principal; cooldown_ms: how long a
 * principal that spent it is refused.  NULL when out of memory. */
sbx_fb *sbx_fb_new(sbx_h2g_rate rate, uint64_t cooldown_ms);
void sbx_fb_free(sbx_fb *b);
/* The key of a principal (found or made; never 0).  The table is bounded:
 * the least recently seen principal not cooling down makes room. */
uint32_t sbx_fb_key(sbx_fb *b, const char *name, uint64_t now_ms);
/* Is the principal of key cooling down? */
bool sbx_fb_penalised(const sbx_fb *b, uint32_t key, uint64_t now_ms);
/* Charge one reset to key; false when its budget is spent (its cool-down
 * starts).  A key whose slot went to another principal charges nothing. */
bool sbx_fb_reset(sbx_fb *b, uint32_t key, uint64_t now_ms);

#endif
