/*
 * Typed metadata lists, a growing string, and the JSON text hurray keeps
 * GGUF arrays in. The arrays are written and read here rather than through
 * jansson because they must carry what jansson refuses: raw bytes of
 * strings that are not UTF-8 (as Python's surrogateescape \udcXX escapes)
 * and NaN/Infinity, exactly as the Python converter writes them.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "formats_internal.h"

/* ------------------------------------------------------------ metadata */

const HurrayMeta *hurray__meta_find(const HurrayMetaList *l, const char *key) {
  for (size_t i = 0; i < l->count; i++) {
    if (strcmp(l->items[i].key, key) == 0) return &l->items[i];
  }
  return NULL;
}

static void meta_clear(HurrayMeta *m) {
  free(m->bytes);
  m->bytes = NULL;
  m->len = 0;
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
  for (size_t i = 0; i < l->count; i++) {
    if (strcmp(l->items[i].key, key) == 0) {
      meta_clear(&l->items[i]);
      fresh.key = l->items[i].key;
      l->items[i] = fresh;
      return HURRAY_OK;
    }
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
  return HURRAY_OK;
}

void hurray__meta_free(HurrayMetaList *l) {
  for (size_t i = 0; i < l->count; i++) {
    free(l->items[i].key);
    meta_clear(&l->items[i]);
  }
  free(l->items);
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

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if invalid. */
static size_t utf8_seq(const uint8_t *p, size_t n, uint32_t *cp) {
  uint8_t c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t need;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) {
    need = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    need = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    need = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (n < need) return 0;
  for (size_t k = 1; k < need; k++) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[k] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return need;
}

void hurray__str_json_string(HurrayStr *s, const uint8_t *data, size_t len) {
  hurray__str_addc(s, '"');
  size_t i = 0;
  while (i < len) {
    uint32_t cp = 0;
    size_t k = utf8_seq(data + i, len - i, &cp);
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

typedef struct JP {
  const uint8_t *p, *end;
  HurrayError *error;
  unsigned depth;
} JP;

static HurrayStatus jfail(JP *jp, const char *why) {
  return hurray__fail(jp->error, HURRAY_ERR_MALFORMED, "metadata value is not valid JSON: %s", why);
}

static void jws(JP *jp) {
  while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\n' || *jp->p == '\r' || *jp->p == '\t'))
    jp->p++;
}

static bool jlit(JP *jp, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(jp->end - jp->p) >= n && memcmp(jp->p, lit, n) == 0) {
    jp->p += n;
    return true;
  }
  return false;
}

static int hexval(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool jhex4(JP *jp, uint32_t *out) {
  if (jp->end - jp->p < 4) return false;
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(jp->p[k]);
    if (h < 0) return false;
    v = v * 16 + (uint32_t)h;
  }
  jp->p += 4;
  *out = v;
  return true;
}

static HurrayStatus jstring(JP *jp, HurrayJ *out) {
  HurrayStr s = {0};
  jp->p++; /* the opening quote */
  for (;;) {
    if (jp->p >= jp->end) {
      hurray__str_free(&s);
      return jfail(jp, "unterminated string");
    }
    uint8_t c = *jp->p++;
    if (c == '"') break;
    if (c < 0x20) {
      hurray__str_free(&s);
      return jfail(jp, "control character in a string");
    }
    if (c != '\\') {
      hurray__str_addc(&s, (char)c);
      continue;
    }
    if (jp->p >= jp->end) {
      hurray__str_free(&s);
      return jfail(jp, "unterminated escape");
    }
    c = *jp->p++;
    const char *simple = strchr("\"\\/bfnrt", c);
    if (simple != NULL && c != 0) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      hurray__str_addc(&s, map[simple - "\"\\/bfnrt"]);
      continue;
    }
    uint32_t u;
    if (c != 'u' || !jhex4(jp, &u)) {
      hurray__str_free(&s);
      return jfail(jp, "bad escape");
    }
    if (u >= 0xDC80 && u <= 0xDCFF) { /* surrogateescape: one raw byte */
      hurray__str_addc(&s, (char)(u - 0xDC00));
      continue;
    }
    if (u >= 0xD800 && u <= 0xDBFF) {
      uint32_t lo;
      if (!(jlit(jp, "\\u") && jhex4(jp, &lo) && lo >= 0xDC00 && lo <= 0xDFFF)) {
        hurray__str_free(&s);
        return jfail(jp, "unpaired surrogate");
      }
      u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
    } else if (u >= 0xDC00 && u <= 0xDFFF) {
      hurray__str_free(&s);
      return jfail(jp, "unpaired surrogate");
    }
    char b[4];
    size_t n;
    if (u < 0x80) {
      b[0] = (char)u, n = 1;
    } else if (u < 0x800) {
      b[0] = (char)(0xC0 | (u >> 6)), b[1] = (char)(0x80 | (u & 0x3F)), n = 2;
    } else if (u < 0x10000) {
      b[0] = (char)(0xE0 | (u >> 12)), b[1] = (char)(0x80 | ((u >> 6) & 0x3F));
      b[2] = (char)(0x80 | (u & 0x3F)), n = 3;
    } else {
      b[0] = (char)(0xF0 | (u >> 18)), b[1] = (char)(0x80 | ((u >> 12) & 0x3F));
      b[2] = (char)(0x80 | ((u >> 6) & 0x3F)), b[3] = (char)(0x80 | (u & 0x3F)), n = 4;
    }
    hurray__str_add(&s, b, n);
  }
  if (s.oom) {
    hurray__str_free(&s);
    return hurray__fail(jp->error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  out->kind = HJ_STR;
  out->len = s.len;
  out->str = (uint8_t *)(s.p != NULL ? s.p : calloc(1, 1));
  if (out->str == NULL) return hurray__fail(jp->error, HURRAY_ERR_NO_MEMORY, "out of memory");
  return HURRAY_OK;
}

static HurrayStatus jnumber(JP *jp, HurrayJ *out) {
  out->kind = HJ_NUM;
  if (jlit(jp, "NaN")) {
    out->num = NAN;
    return HURRAY_OK;
  }
  bool neg = jlit(jp, "-");
  if (jlit(jp, "Infinity")) {
    out->num = neg ? -INFINITY : INFINITY;
    return HURRAY_OK;
  }
  const uint8_t *start = jp->p;
  bool is_int = true, overflow = false;
  uint64_t mag = 0;
  size_t digits = 0;
  while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9') {
    unsigned d = (unsigned)(*jp->p - '0');
    if (mag > (UINT64_MAX - d) / 10) overflow = true;
    else mag = mag * 10 + d;
    jp->p++;
    digits++;
  }
  if (digits == 0) return jfail(jp, "expected a value");
  if (jp->p < jp->end && *jp->p == '.') {
    is_int = false;
    jp->p++;
    if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9') return jfail(jp, "bad number");
    while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9') jp->p++;
  }
  if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
    is_int = false;
    jp->p++;
    if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-')) jp->p++;
    if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9') return jfail(jp, "bad number");
    while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9') jp->p++;
  }
  char buf[512];
  size_t n = (size_t)(jp->p - start);
  if (n >= sizeof buf - 1) return jfail(jp, "number too long");
  buf[0] = neg ? '-' : '+';
  memcpy(buf + 1, start, n);
  buf[n + 1] = 0;
  out->num = strtod(buf, NULL);
  out->is_int = is_int && !overflow;
  out->negative = neg;
  out->mag = mag;
  return HURRAY_OK;
}

static HurrayStatus jvalue(JP *jp, HurrayJ *out) {
  jws(jp);
  if (jp->p >= jp->end) return jfail(jp, "ends early");
  uint8_t c = *jp->p;
  if (c == '"') return jstring(jp, out);
  if (jlit(jp, "true")) {
    out->kind = HJ_BOOL, out->b = true;
    return HURRAY_OK;
  }
  if (jlit(jp, "false")) {
    out->kind = HJ_BOOL, out->b = false;
    return HURRAY_OK;
  }
  if (c == '{') {
    if (++jp->depth > 2) return jfail(jp, "nested too deeply");
    jp->p++;
    out->kind = HJ_OBJ;
    size_t cap = 0;
    jws(jp);
    if (jp->p < jp->end && *jp->p == '}') {
      jp->p++;
      jp->depth--;
      return HURRAY_OK;
    }
    for (;;) {
      if (out->len == cap) {
        size_t ncap = cap ? cap * 2 : 8;
        HurrayJ *items = realloc(out->items, ncap * sizeof *items);
        if (items != NULL) out->items = items;
        HurrayJ *keys = items != NULL ? realloc(out->keys, ncap * sizeof *keys) : NULL;
        if (keys != NULL) out->keys = keys;
        if (items == NULL || keys == NULL) {
          return hurray__fail(jp->error, HURRAY_ERR_NO_MEMORY, "out of memory");
        }
        cap = ncap;
      }
      memset(&out->items[out->len], 0, sizeof out->items[0]);
      memset(&out->keys[out->len], 0, sizeof out->keys[0]);
      out->len++;
      jws(jp);
      if (jp->p >= jp->end || *jp->p != '"') return jfail(jp, "expected a key");
      HURRAY_RETURN_NOT_OK(jstring(jp, &out->keys[out->len - 1]));
      jws(jp);
      if (jp->p >= jp->end || *jp->p != ':') return jfail(jp, "expected :");
      jp->p++;
      HURRAY_RETURN_NOT_OK(jvalue(jp, &out->items[out->len - 1]));
      jws(jp);
      if (jp->p < jp->end && *jp->p == ',') {
        jp->p++;
        continue;
      }
      if (jp->p < jp->end && *jp->p == '}') {
        jp->p++;
        jp->depth--;
        return HURRAY_OK;
      }
      return jfail(jp, "expected , or }");
    }
  }
  if (c != '[') return jnumber(jp, out);
  if (++jp->depth > HURRAY_GGUF_MAX_ARRAY_DEPTH + 1) return jfail(jp, "nested too deeply");
  jp->p++;
  out->kind = HJ_ARR;
  size_t cap = 0;
  jws(jp);
  if (jp->p < jp->end && *jp->p == ']') {
    jp->p++;
    jp->depth--;
    return HURRAY_OK;
  }
  for (;;) {
    if (out->len == cap) {
      /* Every item takes at least two bytes of text: no more than that. */
      size_t ncap = cap ? cap * 2 : 8;
      HurrayJ *items = realloc(out->items, ncap * sizeof *items);
      if (items == NULL) return hurray__fail(jp->error, HURRAY_ERR_NO_MEMORY, "out of memory");
      out->items = items;
      cap = ncap;
    }
    memset(&out->items[out->len], 0, sizeof out->items[0]);
    out->len++;
    HURRAY_RETURN_NOT_OK(jvalue(jp, &out->items[out->len - 1]));
    jws(jp);
    if (jp->p < jp->end && *jp->p == ',') {
      jp->p++;
      continue;
    }
    if (jp->p < jp->end && *jp->p == ']') {
      jp->p++;
      jp->depth--;
      return HURRAY_OK;
    }
    return jfail(jp, "expected , or ]");
  }
}

HurrayStatus hurray__j_parse(const uint8_t *text, size_t len, HurrayJ *out, HurrayError *error) {
  memset(out, 0, sizeof *out);
  JP jp = {text, text + len, error, 0};
  HurrayStatus s = jvalue(&jp, out);
  if (s == HURRAY_OK) {
    jws(&jp);
    if (jp.p != jp.end) s = jfail(&jp, "text after the value");
  }
  if (s != HURRAY_OK) hurray__j_free(out);
  return s;
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
