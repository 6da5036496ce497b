/*
 * Untrusted text made safe to show (hurray_escape_text): the one escaping
 * of names and values read from files, used by the CLI for what it prints
 * and by the library for the messages that quote them.
 */
#include <stdio.h>
#include <string.h>

#include "descriptor_internal.h"
#include "hurray/common.h"

size_t hurray__utf8_next(const uint8_t *s, size_t len, uint32_t *cp) {
  uint8_t c = s[0];
  size_t n;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    n = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (len < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

bool hurray__text_needs_escape(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

/* The escape of the character at s (n bytes, code point cp; n == 0: a
 * byte that is not UTF-8) into piece, and its length. */
static size_t escape_one(const uint8_t *s, size_t n, uint32_t cp, unsigned flags, char *piece) {
  bool json = (flags & HURRAY_ESCAPE_JSON) != 0;
  if (n == 0) {
    return (size_t)(json ? snprintf(piece, 16, "\\ufffd") : snprintf(piece, 16, "\\x%02x", s[0]));
  }
  if ((flags & HURRAY_ESCAPE_BACKSLASH) && (cp == '\\' || (json && cp == '"'))) {
    return (size_t)snprintf(piece, 16, "\\%c", (char)cp);
  }
  if (cp == '\n' || cp == '\r' || cp == '\t') {
    return (size_t)snprintf(piece, 16, "%s", cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : "\\t");
  }
  if (hurray__text_needs_escape(cp)) {
    if (json) return (size_t)snprintf(piece, 16, "\\u%04x", (unsigned)cp);
    return (size_t)(cp < 0x80 ? snprintf(piece, 16, "\\x%02x", (unsigned)cp)
                              : snprintf(piece, 16, "\\u{%04x}", (unsigned)cp));
  }
  memcpy(piece, s, n);
  return n;
}

size_t hurray_escape_text(const char *text, size_t len, unsigned flags, char *out,
                          size_t out_size) {
  const uint8_t *p = (const uint8_t *)text;
  size_t need = 0, written = 0;
  bool full = out == NULL || out_size == 0;
  for (size_t i = 0; text != NULL && i < len;) {
    uint32_t cp = 0;
    size_t n = hurray__utf8_next(p + i, len - i, &cp);
    char piece[16];
    size_t k = escape_one(p + i, n, cp, flags, piece);
    i += n ? n : 1;
    need += k;
    if (!full && written + k < out_size) {
      memcpy(out + written, piece, k);
      written += k;
    } else {
      full = true; /* never half an escape or a character */
    }
  }
  if (out != NULL && out_size > 0) out[written] = '\0';
  return need;
}
