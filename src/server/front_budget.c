/*
 * front_budget.c: per-principal reset budgets and cool-downs
 * (front_budget.h), in a fixed open-addressed table: a key is its slot
 * and the slot's generation, so a stream still holding the key of a
 * principal that was pushed out charges nobody.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front_budget.h"

#define SLOTS 1024 /* principals remembered; keys hold slot + 1 in 12 bits */
#define PROBE 16   /* slots looked at from a name's hash */
#define NAME_MAX_ 96

typedef struct slot {
	char name[NAME_MAX_];
	bool used;
	uint32_t gen;
	sbx_h2g_bucket bucket;
	uint64_t seen_ms, until_ms; /* last use; end of its cool-down */
} slot;

struct sbx_fb {
	sbx_h2g_rate rate;
	uint64_t cooldown_ms;
	slot slots[SLOTS];
};

sbx_fb *sbx_fb_new(sbx_h2g_rate rate, uint64_t cooldown_ms)
{
	sbx_fb *b = calloc(1, sizeof(*b));
	if (b) {
		b->rate = rate;
		b->cooldown_ms = cooldown_ms;
	}
	return b;
}

void sbx_fb_free(sbx_fb *b)
{
	free(b);
}

static uint32_t hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static uint32_t key_of(const sbx_fb *b, size_t i)
{
	return (b->slots[i].gen & 0xfffffu) << 12 | (uint32_t)(i + 1);
}

/* The slot index of key, or SLOTS when its principal is gone. */
static size_t by_key(const sbx_fb *b, uint32_t key)
{
	size_t i = key & 0xfffu;
	if (i == 0 || i > SLOTS || !b->slots[i - 1].used || key != key_of(b, i - 1))
		return SLOTS;
	return i - 1;
}

/* Is slot a a better place for a new principal than cur?  A free slot,
 * else one not cooling down, else the least recently seen. */
static bool roomier(const slot *a, const slot *cur, uint64_t now)
{
	if (!cur)
		return true;
	if (!cur->used || !a->used)
		return cur->used;
	bool ac = a->until_ms > now, cc = cur->until_ms > now;
	if (ac != cc)
		return !ac;
	return a->seen_ms < cur->seen_ms;
}

uint32_t sbx_fb_key(sbx_fb *b, const char *name, uint64_t now)
{
	char n[NAME_MAX_];
	size_t h = hash(name) % SLOTS, pick = 0;
	slot *room = NULL;

	snprintf(n, sizeof(n), "%s", name);
	for (size_t k = 0; k < PROBE; k++) {
		size_t i = (h + k) % SLOTS;
		slot *s = &b->slots[i];
		if (s->used && !strcmp(s->name, n)) {
			s->seen_ms = now;
			return key_of(b, i);
		}
		if (roomier(s, room, now)) {
			room = s;
			pick = i;
		}
	}
	uint32_t gen = room->gen + 1;
	memset(room, 0, sizeof(*room));
	room->used = true;
	room->gen = gen;
	memcpy(room->name, n, sizeof(n));
	room->seen_ms = now;
	return key_of(b, pick);
}

bool sbx_fb_penalised(const sbx_fb *b, uint32_t key, uint64_t now)
{
	size_t i = by_key(b, key);
	return i < SLOTS && b->slots[i].until_ms > now;
}

bool sbx_fb_reset(sbx_fb *b, uint32_t key, uint64_t now)
{
	size_t i = by_key(b, key);
	if (i == SLOTS)
		return true;
	slot *s = &b->slots[i];
	s->seen_ms = now;
	if (sbx_h2g_take(&s->bucket, &b->rate, now))
		return true;
	s->until_ms = now + b->cooldown_ms;
	return false;
}
