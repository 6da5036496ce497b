/*
 * Typed metadata lists, a growing string, and the JSON text hurray keeps
 * GGUF arrays in: written here, in Python's json form (raw bytes of strings
 * that are not UTF-8 as surrogateescape \udcXX escapes, NaN/Infinity), and
 * read with yajl, the one JSON parser of the library (see the reader).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "../core/c_locale.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "formats_internal.h"
#include "yajl_guard.h"

/* ------------------------------------------------------------ metadata */

static void meta_key_of(const void *ctx, size_t i, const char **name, size_t *len) {
  const HurrayMetaList *l = ctx;
  *name = l->items[i].key;
  *len = strlen(l->items[i].key);
}

const HurrayMeta *hurray__meta_find(const HurrayMetaList *l, const char *key) {
  size_t at = hurray__name_set_find(&l->keys, meta_key_of, l, key, strlen(key));
  return at != 0 ? &l->items[at - 1] : NULL;
}

static void meta_clear(HurrayMeta *m) {
  free(m->bytes);
  m->bytes = NULL;
  m->len = 0;
}

bool hurray__foreign_name_ok(const char *name, size_t limit) {
  size_t len = strlen(name);
  return len > 0 && len <= limit && hurray__utf8_valid(name, len);
}

HurrayStatus hurray__meta_set(HurrayMetaList *l, const char *key, HurrayMetadataType type,
                              const void *value, size_t len, HurrayError *error) {
  if (key == NULL || (value == NULL && len != 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "metadata key and value are required");
  }
  HurrayMeta fresh = {0};
  fresh.type = type;
  switch (type) {
    case HURRAY_METADATA_INT:
      if (value == NULL) goto bad;
      memcpy(&fresh.i, value, sizeof fresh.i);
      break;
    case HURRAY_METADATA_FLOAT:
      if (value == NULL) goto bad;
      memcpy(&fresh.f, value, sizeof fresh.f);
      break;
    case HURRAY_METADATA_BOOL:
      if (value == NULL) goto bad;
      fresh.b = *(const bool *)value;
      break;
    case HURRAY_METADATA_STRING:
    case HURRAY_METADATA_BYTES:
      fresh.bytes = malloc(len + 1);
      if (fresh.bytes == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
      if (len) memcpy(fresh.bytes, value, len);
      fresh.bytes[len] = 0;
      fresh.len = len;
      break;
    default:
    bad:
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "metadata %s: bad type or value",
                          key);
  }
  if (hurray__name_set_reserve(&l->keys, l->count) != HURRAY_OK) {
    meta_clear(&fresh);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  size_t *slot = hurray__name_set_slot(&l->keys, meta_key_of, l, key, strlen(key));
  if (*slot != 0) {
    HurrayMeta *old = &l->items[*slot - 1];
    meta_clear(old);
    fresh.key = old->key;
    *old = fresh;
    return HURRAY_OK;
  }
  if (l->count == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    HurrayMeta *items = realloc(l->items, cap * sizeof *items);
    if (items == NULL) {
      meta_clear(&fresh);
      return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    }
    l->items = items;
    l->cap = cap;
  }
  fresh.key = strdup(key);
  if (fresh.key == NULL) {
    meta_clear(&fresh);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  l->items[l->count++] = fresh;
  *slot = l->count; /* the slot is still this key's: nothing moved since */
  return HURRAY_OK;
}

void hurray__meta_free(HurrayMetaList *l) {
  for (size_t i = 0; i < l->count; i++) {
    free(l->items[i].key);
    meta_clear(&l->items[i]);
  }
  free(l->items);
  hurray__name_set_free(&l->keys);
  memset(l, 0, sizeof *l);
}

/* -------------------------------------------------------------- string */

static bool str_reserve(HurrayStr *s, size_t extra) {
  if (s->oom) return false;
  if (s->len + extra + 1 <= s->cap) return true;
  size_t cap = s->cap ? s->cap : 256;
  while (cap < s->len + extra + 1) {
    if (cap > SIZE_MAX / 2) {
      s->oom = true;
      return false;
    }
    cap *= 2;
  }
  char *p = realloc(s->p, cap);
  if (p == NULL) {
    s->oom = true;
    return false;
  }
  s->p = p;
  s->cap = cap;
  return true;
}

void hurray__str_add(HurrayStr *s, const void *data, size_t len) {
  if (!str_reserve(s, len)) return;
  if (len) memcpy(s->p + s->len, data, len);
  s->len += len;
  s->p[s->len] = 0;
}

void hurray__str_addc(HurrayStr *s, char c) { hurray__str_add(s, &c, 1); }

void hurray__str_addf(HurrayStr *s, const char *fmt, ...) {
  char small[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    s->oom = true;
    return;
  }
  if ((size_t)n < sizeof small) {
    hurray__str_add(s, small, (size_t)n);
    return;
  }
  if (!str_reserve(s, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(s->p + s->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  s->len += (size_t)n;
}

void hurray__str_free(HurrayStr *s) {
  free(s->p);
  memset(s, 0, sizeof *s);
}

void hurray__str_json_string(HurrayStr *s, const uint8_t *data, size_t len) {
  hurray__str_addc(s, '"');
  size_t i = 0;
  while (i < len) {
    uint32_t cp = 0;
    size_t k = hurray__utf8_next(data + i, len - i, &cp);
    if (k == 0) {
      hurray__str_addf(s, "\\udc%02x", data[i]);
      i++;
      continue;
    }
    i += k;
    switch (cp) {
      case '"': hurray__str_add(s, "\\\"", 2); continue;
      case '\\': hurray__str_add(s, "\\\\", 2); continue;
      case '\n': hurray__str_add(s, "\\n", 2); continue;
      case '\r': hurray__str_add(s, "\\r", 2); continue;
      case '\t': hurray__str_add(s, "\\t", 2); continue;
      case '\b': hurray__str_add(s, "\\b", 2); continue;
      case '\f': hurray__str_add(s, "\\f", 2); continue;
      default: break;
    }
    if (cp < 0x20 || cp > 0x7E) {
      if (cp >= 0x10000) {
        uint32_t v = cp - 0x10000;
        hurray__str_addf(s, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        hurray__str_addf(s, "\\u%04x", cp);
      }
    } else {
      hurray__str_addc(s, (char)cp);
    }
  }
  hurray__str_addc(s, '"');
}

void hurray__str_json_raw(HurrayStr *s, const uint8_t *data, size_t len) {
  hurray__str_addc(s, '"');
  for (size_t i = 0; i < len; i++) {
    uint8_t c = data[i];
    switch (c) {
      case '"': hurray__str_add(s, "\\\"", 2); break;
      case '\\': hurray__str_add(s, "\\\\", 2); break;
      case '\n': hurray__str_add(s, "\\n", 2); break;
      case '\r': hurray__str_add(s, "\\r", 2); break;
      case '\t': hurray__str_add(s, "\\t", 2); break;
      case '\b': hurray__str_add(s, "\\b", 2); break;
      case '\f': hurray__str_add(s, "\\f", 2); break;
      default:
        if (c < 0x20) hurray__str_addf(s, "\\u%04x", c);
        else hurray__str_addc(s, (char)c);
    }
  }
  hurray__str_addc(s, '"');
}

/* ---------------------------------------------------------- JSON reader */

/* Read with yajl, the project's one JSON parser (safetensors headers are
 * too). Python's json module writes two things plain JSON, and so yajl,
 * lacks, and hurray keeps GGUF values in its form:
 *  - NaN, Infinity and -Infinity: mark_numbers turns each into a 0 of the
 *    same width and notes, for every number in text order, which it was;
 *  - \udcXX escapes, one per raw byte of a string that is not UTF-8
 *    (surrogateescape): yajl decodes them to the three-byte form of the
 *    surrogate, which j_string maps back to the byte. The text is checked
 *    to be strict UTF-8 first, so that form comes from escapes only. */

enum { NUM_PLAIN, NUM_NAN, NUM_INF, NUM_NEG_INF };

typedef struct JB {
  HurrayJ root;
  HurrayJ *open[HURRAY_GGUF_MAX_ARRAY_DEPTH + 2]; /* containers being filled */
  size_t cap[HURRAY_GGUF_MAX_ARRAY_DEPTH + 2];
  unsigned depth;
  bool have_root, have_key;
  HurrayJ key; /* an object's key, until its value comes */
  const uint8_t *kinds;
  size_t nkinds, next_kind;
  HurrayError *error;
  HurrayStatus status;
} JB;

static int jfail(JB *b, const char *why) {
  b->status = hurray__fail(b->error, HURRAY_ERR_MALFORMED, "metadata value is not valid JSON: %s",
                           why);
  return 0;
}

static int joom(JB *b) {
  b->status = hurray__fail(b->error, HURRAY_ERR_NO_MEMORY, "out of memory");
  return 0;
}

static bool starts(const uint8_t *p, const uint8_t *end, const char *lit) {
  size_t n = strlen(lit);
  return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0;
}

/* See above. `kinds` gets one byte per number (at most one per byte of
 * text). A NaN or Infinity is taken only where a value may start, so that
 * "1NaN" stays an error instead of becoming the number 10. */
static void mark_numbers(uint8_t *text, size_t len, uint8_t *kinds, size_t *count) {
  static const struct {
    const char *lit;
    uint8_t kind;
  } special[] = {{"NaN", NUM_NAN}, {"Infinity", NUM_INF}, {"-Infinity", NUM_NEG_INF}};
  const uint8_t *end = text + len;
  bool in_string = false;
  uint8_t last = '[';
  for (uint8_t *p = text; p < end; p++) {
    if (in_string) {
      if (*p == '\\') p++;
      else if (*p == '"') in_string = false;
      continue;
    }
    if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') continue;
    bool value_start = last == '[' || last == ',' || last == ':';
    size_t k = 0;
    while (k < 3 && !(value_start && starts(p, end, special[k].lit))) k++;
    if (k < 3) {
      size_t n = strlen(special[k].lit);
      bool negative = special[k].kind == NUM_NEG_INF;
      memset(p, ' ', n);
      p[0] = negative ? '-' : '0';
      if (negative) p[1] = '0';
      p += n - 1;
      kinds[(*count)++] = special[k].kind;
      last = '0';
      continue;
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
      kinds[(*count)++] = NUM_PLAIN;
      while (p + 1 < end && strchr("0123456789+-.eE", p[1]) != NULL && p[1] != 0) p++;
      last = '0';
      continue;
    }
    in_string = *p == '"';
    last = *p;
  }
}

/* The next value's place: the root, or a new item of the open container. */
static HurrayJ *jslot(JB *b) {
  if (b->depth == 0) {
    b->have_root = true;
    return &b->root;
  }
  HurrayJ *c = b->open[b->depth - 1];
  size_t *cap = &b->cap[b->depth - 1];
  if (c->kind == HJ_OBJ && !b->have_key) return NULL; /* yajl sends keys first */
  if (c->len == *cap) {
    size_t ncap = *cap ? *cap * 2 : 1; /* from 1: an 8-item table per "[[]]" cost 250x its text */
    HurrayJ *items = realloc(c->items, ncap * sizeof *items);
    if (items == NULL) return NULL;
    c->items = items;
    if (c->kind == HJ_OBJ) {
      HurrayJ *keys = realloc(c->keys, ncap * sizeof *keys);
      if (keys == NULL) return NULL;
      c->keys = keys;
    }
    *cap = ncap;
  }
  if (c->kind == HJ_OBJ) {
    c->keys[c->len] = b->key;
    memset(&b->key, 0, sizeof b->key);
    b->have_key = false;
  }
  HurrayJ *v = &c->items[c->len++];
  memset(v, 0, sizeof *v);
  return v;
}

static int j_null(void *ctx) { return jfail(ctx, "null is not a value hurray keeps"); }

static int j_bool(void *ctx, int value) {
  HurrayJ *v = jslot(ctx);
  if (v == NULL) return joom(ctx);
  v->kind = HJ_BOOL;
  v->b = value != 0;
  return 1;
}

static int j_number(void *ctx, const char *s, size_t len) {
  JB *b = ctx;
  if (b->next_kind >= b->nkinds) return jfail(b, "a number out of place");
  uint8_t kind = b->kinds[b->next_kind++];
  HurrayJ *v = jslot(b);
  if (v == NULL) return joom(b);
  v->kind = HJ_NUM;
  if (kind != NUM_PLAIN) {
    v->num = kind == NUM_NAN ? NAN : kind == NUM_INF ? INFINITY : -INFINITY;
    return 1;
  }
  char buf[512];
  if (len >= sizeof buf) return jfail(b, "number too long");
  memcpy(buf, s, len);
  buf[len] = 0;
  v->num = hurray__parse_double(buf, NULL);
  v->negative = buf[0] == '-';
  bool overflow = false;
  size_t i = v->negative;
  for (; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
    unsigned d = (unsigned)(buf[i] - '0');
    if (v->mag > (UINT64_MAX - d) / 10) overflow = true;
    else v->mag = v->mag * 10 + d;
  }
  v->is_int = i == len && !overflow;
  return 1;
}

/* A decoded string, surrogate escapes of raw bytes undone. */
static int j_decode(JB *b, const unsigned char *s, size_t len, HurrayJ *out) {
  uint8_t *str = malloc(len + 1);
  if (str == NULL) return joom(b);
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == 0xED && i + 2 < len && (s[i + 1] & 0xE0) == 0xA0) {
      uint32_t u = 0xD000u | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      if (u < 0xDC80 || u > 0xDCFF) {
        free(str);
        return jfail(b, "unpaired surrogate");
      }
      str[n++] = (uint8_t)(u - 0xDC00);
      i += 2;
    } else {
      str[n++] = s[i];
    }
  }
  str[n] = 0;
  out->kind = HJ_STR;
  out->str = str;
  out->len = n;
  return 1;
}

static int j_string(void *ctx, const unsigned char *s, size_t len) {
  HurrayJ *v = jslot(ctx);
  return v == NULL ? joom(ctx) : j_decode(ctx, s, len, v);
}

static int j_key(void *ctx, const unsigned char *s, size_t len) {
  JB *b = ctx;
  if (!j_decode(b, s, len, &b->key)) return 0;
  b->have_key = true;
  return 1;
}

static int j_open(JB *b, HurrayJKind kind, unsigned limit) {
  if (b->depth + 1 > limit) return jfail(b, "nested too deeply");
  HurrayJ *v = jslot(b);
  if (v == NULL) return joom(b);
  v->kind = kind;
  b->cap[b->depth] = 0;
  b->open[b->depth++] = v;
  return 1;
}

static int j_start_map(void *ctx) { return j_open(ctx, HJ_OBJ, 2); }

static int j_start_array(void *ctx) {
  return j_open(ctx, HJ_ARR, HURRAY_GGUF_MAX_ARRAY_DEPTH + 1);
}

static int j_close(void *ctx) {
  ((JB *)ctx)->depth--;
  return 1;
}

static const yajl_callbacks j_callbacks = {j_null,   j_bool,        NULL,        NULL,
                                           j_number, j_string,      j_start_map, j_key,
                                           j_close,  j_start_array, j_close};

/* Four hex digits at p (n bytes left) into *u. */
static bool hex4(const uint8_t *p, size_t n, unsigned *u) {
  if (n < 4) return false;
  *u = 0;
  for (int k = 0; k < 4; k++) {
    unsigned c = p[k], lower = c | 0x20u;
    unsigned d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (lower >= 'a' && lower <= 'f') d = lower - 'a' + 10;
    else return false;
    *u = *u * 16 + d;
  }
  return true;
}

/* A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF one: yajl
 * decodes it to "?", so it is found in the text (a lone low one reaches
 * j_decode as its three-byte form). */
static bool has_lone_high_surrogate(const uint8_t *t, size_t len) {
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    if (!in_string || t[i] == '"') {
      if (t[i] == '"') in_string = !in_string;
      continue;
    }
    if (t[i] != '\\' || i + 1 >= len) continue;
    unsigned u, v;
    if (t[i + 1] == 'u' && hex4(t + i + 2, len - (i + 2), &u) && u >= 0xD800 && u <= 0xDBFF) {
      bool paired = i + 7 < len && t[i + 6] == '\\' && t[i + 7] == 'u' &&
                    hex4(t + i + 8, len - (i + 8), &v) && v >= 0xDC00 && v <= 0xDFFF;
      if (!paired) return true;
      i += 11; /* both escapes */
      continue;
    }
    i++; /* the escaped character */
  }
  return false;
}

HurrayStatus hurray__j_parse(const uint8_t *text, size_t len, HurrayJ *out, HurrayError *error) {
  memset(out, 0, sizeof *out);
  if (!hurray__utf8_valid((const char *)text, len)) {
    return hurray__fail(error, HURRAY_ERR_MALFORMED,
                        "metadata value is not valid JSON: not UTF-8, or holds a NUL");
  }
  if (has_lone_high_surrogate(text, len)) {
    return hurray__fail(error, HURRAY_ERR_MALFORMED,
                        "metadata value is not valid JSON: unpaired surrogate");
  }
  uint8_t *copy = malloc(len + 1), *kinds = malloc(len + 1);
  JB b = {.error = error, .status = HURRAY_OK, .kinds = kinds};
  if (copy == NULL || kinds == NULL) {
    free(copy);
    free(kinds);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  if (len) memcpy(copy, text, len);
  mark_numbers(copy, len, kinds, &b.nkinds);
  yajl_status ys = yajl_status_ok;
  char line[160] = "parse error";
  HurrayStatus s = hurray__yajl_parse(&j_callbacks, &b, copy, len, &ys, line, sizeof line);
  if (s != HURRAY_OK) {
    s = hurray__fail(error, s, "out of memory");
  } else {
    s = b.status;
    if (ys != yajl_status_ok && s == HURRAY_OK) {
      s = hurray__fail(error, HURRAY_ERR_MALFORMED, "metadata value is not valid JSON: %s", line);
    }
  }
  free(copy);
  free(kinds);
  hurray__j_free(&b.key);
  if (s != HURRAY_OK || !b.have_root) {
    hurray__j_free(&b.root);
    if (s == HURRAY_OK) s = hurray__fail(error, HURRAY_ERR_MALFORMED, "metadata value is empty");
    return s;
  }
  *out = b.root;
  return HURRAY_OK;
}

void hurray__j_free(HurrayJ *j) {
  if (j->kind == HJ_ARR || j->kind == HJ_OBJ) {
    for (size_t i = 0; i < j->len; i++) {
      hurray__j_free(&j->items[i]);
      if (j->kind == HJ_OBJ) hurray__j_free(&j->keys[i]);
    }
    free(j->items);
    free(j->keys);
  } else if (j->kind == HJ_STR) {
    free(j->str);
  }
  memset(j, 0, sizeof *j);
}
