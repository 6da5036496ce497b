/*
 * Debian's yajl (2.1) does not check what its allocator returns: under
 * memory pressure yajl_alloc, its lexer and its buffers write through NULL.
 * The allocator given to it here records every block it hands out in a
 * list and, when malloc fails, jumps back out of yajl (longjmp) instead of
 * returning NULL; the half-built handle is then unusable, so every block
 * still recorded is freed here. yajl calls the allocator only from its own
 * code, never while a callback of ours runs, so no state of ours is cut
 * short by the jump.
 */
#include "yajl_guard.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The header before each block: its links, at the alignment malloc gives. */
typedef union Block {
  struct {
    union Block *prev, *next;
  } link;
  max_align_t align;
} Block;

typedef struct Guard {
  jmp_buf out;
  Block blocks; /* the list's head: a circle through every live block */
} Guard;

static void link_block(Guard *g, Block *b) {
  b->link.prev = &g->blocks;
  b->link.next = g->blocks.link.next;
  g->blocks.link.next->link.prev = b;
  g->blocks.link.next = b;
}

static void unlink_block(Block *b) {
  b->link.prev->link.next = b->link.next;
  b->link.next->link.prev = b->link.prev;
}

static void *guard_malloc(void *ctx, size_t n) {
  Guard *g = ctx;
  Block *b = n <= SIZE_MAX - sizeof(Block) ? malloc(sizeof(Block) + n) : NULL;
  if (b == NULL) longjmp(g->out, 1);
  link_block(g, b);
  return b + 1;
}

static void *guard_realloc(void *ctx, void *p, size_t n) {
  Guard *g = ctx;
  if (p == NULL) return guard_malloc(ctx, n);
  Block *b = (Block *)p - 1;
  unlink_block(b);
  Block *grown = n <= SIZE_MAX - sizeof(Block) ? realloc(b, sizeof(Block) + n) : NULL;
  if (grown == NULL) {
    link_block(g, b); /* still yajl's: freed with the rest */
    longjmp(g->out, 1);
  }
  link_block(g, grown);
  return grown + 1;
}

static void guard_free(void *ctx, void *p) {
  (void)ctx;
  if (p == NULL) return;
  Block *b = (Block *)p - 1;
  unlink_block(b);
  free(b);
}

/* Everything between setjmp and the last yajl call: nothing of this frame
 * is read after the jump back (see setjmp's rules for automatic objects). */
static int run(Guard *g, const yajl_callbacks *callbacks, void *ctx, const unsigned char *text,
               size_t len, yajl_status *result, char *why, size_t why_size) {
  if (setjmp(g->out) != 0) return 0;
  yajl_alloc_funcs funcs = {guard_malloc, guard_realloc, guard_free, g};
  yajl_handle h = yajl_alloc(callbacks, &funcs, ctx);
  yajl_status ys = yajl_parse(h, text, len);
  if (ys == yajl_status_ok) ys = yajl_complete_parse(h);
  if (ys == yajl_status_error && why != NULL && why_size > 0) {
    unsigned char *text_of_error = yajl_get_error(h, 0, text, len);
    snprintf(why, why_size, "%s", (const char *)text_of_error);
    why[strcspn(why, "\n")] = 0;
    yajl_free_error(h, text_of_error);
  }
  yajl_free(h);
  *result = ys;
  return 1;
}

HurrayStatus hurray__yajl_parse(const yajl_callbacks *callbacks, void *ctx,
                                const unsigned char *text, size_t len, yajl_status *result,
                                char *why, size_t why_size) {
  Guard g;
  g.blocks.link.prev = g.blocks.link.next = &g.blocks;
  if (run(&g, callbacks, ctx, text, len, result, why, why_size)) return HURRAY_OK;
  while (g.blocks.link.next != &g.blocks) {
    Block *b = g.blocks.link.next;
    unlink_block(b);
    free(b);
  }
  return HURRAY_ERR_NO_MEMORY;
}
