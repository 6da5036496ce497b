/*
 * The library's text helpers, through their internal entry points: the
 * JSON reader of GGUF metadata values (yajl with Python's two extensions,
 * src/formats/common.c) and the one escaper of untrusted names
 * (hurray_escape_text), which the CLI and the converter's messages share.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/formats/formats_internal.h"

static HurrayStatus parse(const char *text, HurrayJ *j) {
  HurrayError e = {0};
  return hurray__j_parse((const uint8_t *)text, strlen(text), j, &e);
}

static void test_json_python_extensions(void **state) {
  (void)state;
  HurrayJ j;
  /* A "NaN" inside a string stays text; numbers around the specials keep
   * their own values. */
  assert_int_equal(parse("[1, NaN, \"NaN\", -Infinity, 2.5, Infinity, -7]", &j), HURRAY_OK);
  assert_int_equal(j.kind, HJ_ARR);
  assert_int_equal(j.len, 7);
  assert_true(j.items[0].is_int && j.items[0].mag == 1);
  assert_true(isnan(j.items[1].num));
  assert_int_equal(j.items[2].kind, HJ_STR);
  assert_string_equal((const char *)j.items[2].str, "NaN");
  assert_true(isinf(j.items[3].num) && j.items[3].num < 0);
  assert_false(j.items[4].is_int);
  assert_true(j.items[4].num == 2.5);
  assert_true(isinf(j.items[5].num) && j.items[5].num > 0);
  assert_true(j.items[6].is_int && j.items[6].negative && j.items[6].mag == 7);
  hurray__j_free(&j);
  /* surrogateescape: \udcXX is the raw byte XX; a real pair is UTF-8. */
  assert_int_equal(parse("[\"a\\udcc3b\", \"\\ud83d\\ude00\", \"h\\u00e9\"]", &j), HURRAY_OK);
  assert_int_equal(j.items[0].len, 3);
  assert_memory_equal(j.items[0].str,
                      "a\xc3"
                      "b",
                      3);
  assert_string_equal((const char *)j.items[1].str, "\xf0\x9f\x98\x80");
  assert_string_equal((const char *)j.items[2].str, "h\xc3\xa9");
  hurray__j_free(&j);
  /* Objects keep keys in text order; a 20-digit integer is not an int. */
  assert_int_equal(parse("{\"b\": 18446744073709551616, \"a\": true}", &j), HURRAY_OK);
  assert_int_equal(j.kind, HJ_OBJ);
  assert_string_equal((const char *)j.keys[0].str, "b");
  assert_false(j.items[0].is_int);
  assert_true(j.items[1].kind == HJ_BOOL && j.items[1].b);
  hurray__j_free(&j);
}

static void test_json_refusals(void **state) {
  (void)state;
  static const char *bad[] = {
      "[1NaN]", /* not a value position: stays an error, never "10" */
      "[NaN1]",
      "[null]",
      "[\"\\udc00\"]", /* a surrogate that is no raw byte */
      "[1,]",
      "",
      "[1] [2]",
      "[[[[[[1]]]]]]", /* too deep */
      "{\"a\": {\"b\": {}}}",
      "[\"\xed\xb3\x83\"]", /* raw surrogate bytes */
      "[\"a\x01\"]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    HurrayJ j;
    HurrayError e = {0};
    HurrayStatus s = hurray__j_parse((const uint8_t *)bad[i], strlen(bad[i]), &j, &e);
    if (s == HURRAY_OK) fail_msg("accepted: %s", bad[i]);
    assert_int_equal(s, HURRAY_ERR_MALFORMED);
    assert_non_null(strstr(e.message, "JSON"));
  }
}

static void test_escape_text(void **state) {
  (void)state;
  static const char name[] = "a\x1b[2J\\b\n\xe2\x80\xae\xff\xc2\x85z";
  char out[128];
  size_t n = hurray_escape_text(name, sizeof name - 1, HURRAY_ESCAPE_BACKSLASH, out, sizeof out);
  assert_string_equal(out, "a\\x1b[2J\\\\b\\n\\u{202e}\\xff\\u{0085}z");
  assert_int_equal(n, strlen(out));
  /* Without HURRAY_ESCAPE_BACKSLASH: the same, backslashes kept, and a
   * second pass changes nothing (messages are escaped at every layer). */
  char once[128], twice[128];
  hurray_escape_text(name, sizeof name - 1, 0, once, sizeof once);
  assert_string_equal(once, "a\\x1b[2J\\b\\n\\u{202e}\\xff\\u{0085}z");
  hurray_escape_text(once, strlen(once), 0, twice, sizeof twice);
  assert_string_equal(once, twice);
  /* Cut short: the full length is returned, and no escape is halved. */
  char small[4];
  assert_int_equal(hurray_escape_text("ab\x1b", 3, 0, small, sizeof small), 6);
  assert_string_equal(small, "ab");
  assert_int_equal(hurray_escape_text("x", 1, 0, NULL, 0), 1);
  assert_int_equal(hurray_escape_text("\xe2\x82\xac", 3, 0, small, sizeof small), 3);
  assert_string_equal(small, "\xe2\x82\xac");
  /* JSON: the inside of a JSON string literal. */
  hurray_escape_text("q\"\\\x1b\xff\xe2\x80\xae", 8, HURRAY_ESCAPE_JSON | HURRAY_ESCAPE_BACKSLASH,
                     out, sizeof out);
  assert_string_equal(out, "q\\\"\\\\\\u001b\\ufffd\\u202e");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_python_extensions),
      cmocka_unit_test(test_json_refusals),
      cmocka_unit_test(test_escape_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
