/*
 * Internal helpers the Python bindings call instead of re-implementing them:
 * sub-byte packing (src/core/packing.c), composite member extraction
 * (src/core/member.c), the pre-faulting of fresh outputs
 * (src/quant/fresh_pages.c) and the size of a large buffer's writes
 * (src/io/write_pieces.c). Linked against the library's objects (hidden
 * symbols).
 */
#define _GNU_SOURCE /* mincore, MAP_ANONYMOUS */
#include "test_util.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/core/member.h"
#include "../../src/core/name_set.h"
#include "../../src/core/packing.h"
#include "../../src/io/file_mappings.h"
#include "../../src/io/write_pieces.h"
#include "../../src/quant/fresh_pages.h"

/* MADV_POPULATE_READ retried a failed page read for ever before 6.9. */
static void test_populate_read_needs_linux_6_9(void **state) {
  (void)state;
  assert_false(hurray__populate_read_usable_on("5.14.0"));
  assert_false(hurray__populate_read_usable_on("6.8.12-300.fc40.x86_64"));
  assert_true(hurray__populate_read_usable_on("6.9"));
  assert_true(hurray__populate_read_usable_on("6.18.0-rc1"));
  assert_true(hurray__populate_read_usable_on("7.0.0"));
  assert_false(hurray__populate_read_usable_on("6"));
  assert_false(hurray__populate_read_usable_on("linux"));
  assert_false(hurray__populate_read_usable_on(""));
  assert_false(hurray__populate_read_usable_on(NULL));
}

static void test_pack_unpack_round_trip(void **state) {
  (void)state;
  uint8_t codes[37], back[37], packed[37];
  for (uint32_t bits = 1; bits < 8; bits++) {
    for (uint64_t count = 0; count <= 37; count++) {
      for (uint64_t i = 0; i < count; i++)
        codes[i] = (uint8_t)((i * 7 + bits) & ((1u << bits) - 1));
      memset(packed, 0xAA, sizeof packed);
      hurray__pack_bits(bits, codes, count, packed);
      size_t len = (size_t)((count * bits + 7) / 8);
      if (len > 0 && (count * bits) % 8 != 0) { /* padding bits are zero */
        assert_int_equal(packed[len - 1] >> ((count * bits) % 8), 0);
      }
      hurray__unpack_bits(bits, packed, len, count, back);
      assert_memory_equal(codes, back, (size_t)count);
    }
  }
}

static void test_pack_layout_is_lsb_first(void **state) {
  (void)state;
  uint8_t out[3];
  hurray__pack_bits(4, (const uint8_t[]){0x1, 0x2, 0x3}, 3, out);
  assert_int_equal(out[0], 0x21);
  assert_int_equal(out[1], 0x03);
  /* 6 bits: 4 elements in 3 bytes of a little-endian bit stream. */
  hurray__pack_bits(6, (const uint8_t[]){0x3F, 0x00, 0x01, 0x20}, 4, out);
  assert_int_equal(out[0], 0x3F);
  assert_int_equal(out[1], 0x10); /* element 2 starts at bit 12 */
  assert_int_equal(out[2], 0x80); /* element 3 is bits 18-23 */
}

static void test_unpack_never_reads_past_the_input(void **state) {
  (void)state;
  uint8_t one = 0x21, codes[4] = {9, 9, 9, 9};
  hurray__unpack_bits(4, &one, 1, 4, codes); /* two elements past the byte read as 0 */
  assert_memory_equal(codes, ((uint8_t[]){1, 2, 0, 0}), 4);
}

/* A dense float32 member over buffer `data`. */
static HurrayDescriptor *leaf(uint32_t data) {
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){2}, &d, error));
  assert_ok(hurray_descriptor_set_layout_dense(d, data, error));
  return d;
}

static void test_member_extract_renumbers(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL, *q = NULL, *m = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){2}, &d, error));
  assert_ok(hurray_descriptor_set_layout_composite(d, error));
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, (uint64_t[]){2, 4}, &q, error));
  assert_ok(hurray_descriptor_set_layout_dense(q, 3, error));
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(q, 0, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_add_member(d, "q", q, error));
  assert_ok(hurray_descriptor_add_member(d, "b", leaf(0), error));
  HurrayBufferRole roles[] = {HURRAY_ROLE_DATA, HURRAY_ROLE_SCALES, HURRAY_ROLE_DATA,
                              HURRAY_ROLE_DATA};
  uint64_t sizes[] = {8, 8, 16, 8}; /* b's floats, q's scales, unused, q's codes */
  for (int i = 0; i < 4; i++) {
    assert_ok(
        hurray_descriptor_add_buffer(d, roles[i], sizes[i], 4, HURRAY_SYNC_READY, NULL, error));
  }
  uint32_t map[4], len = 0;
  assert_ok(hurray__member_extract(d, "q", &m, map, &len, error));
  assert_int_equal(len, 2);
  assert_int_equal(map[0], 3); /* layout first ... */
  assert_int_equal(map[1], 1); /* ... then the scales */
  assert_int_equal(hurray_descriptor_data_buffer(m), 0);
  assert_int_equal(hurray_descriptor_buffer_count(m), 2);
  assert_int_equal(hurray_descriptor_buffer_size(m, 0), 8);
  assert_int_equal(hurray_descriptor_buffer_size(m, 1), 8);
  assert_int_equal(hurray_descriptor_buffer_role(m, 1), HURRAY_ROLE_SCALES);
  assert_ok(hurray_descriptor_validate(m, error));
  hurray_descriptor_destroy(m);
  assert_status(HURRAY_ERR_NOT_FOUND, hurray__member_extract(d, "nope", &m, map, &len, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray__member_extract(d, "q", NULL, map, &len, error));
  hurray_descriptor_destroy(d);
}

/* Pages of [p, p + len) (page-aligned) that are resident. */
static size_t resident_pages(uint8_t *p, size_t len, size_t page) {
  unsigned char vec[64];
  size_t n = len / page, count = 0;
  assert_true(n <= sizeof vec);
  assert_int_equal(mincore(p, len, vec), 0);
  for (size_t i = 0; i < n; i++) count += vec[i] & 1;
  return count;
}

/* Under qemu-user (make test-aarch64), which accepts MADV_POPULATE_WRITE
 * and makes nothing resident: what is present is not the library's doing. */
static bool emulated(void) { return getenv("HURRAY_TEST_EMULATED") != NULL; }

/* hurray__prefault_write is advice: content stays, pages only inside the
 * range (whole ones) are touched, and every thread count gives the same
 * memory; where the kernel has MADV_POPULATE_WRITE the pages are present
 * afterwards. A 16 MiB range makes 2 and 3 threads really split it. */
static void test_prefault_write(void **state) {
  (void)state;
  if (emulated()) skip();
  size_t page = (size_t)sysconf(_SC_PAGESIZE), big = (size_t)16 << 20;
  uint8_t *m = mmap(NULL, big + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                    0);
  assert_true(m != MAP_FAILED);
  for (uint32_t threads = 0; threads <= 3; threads++) {
    m[page + 5] = 7;
    m[page + big - 1] = 9;
    hurray__prefault_write(m + page + 3, big - 3, threads,
                           HURRAY_PAGES_AS_IS); /* unaligned both ends */
    assert_int_equal(m[page + 5], 7);
    assert_int_equal(m[page + big - 1], 9);
    assert_int_equal(m[page + 4096 * 7], 0);
  }
  hurray__prefault_write(m, 0, 2, HURRAY_PAGES_AS_IS);
  hurray__prefault_write(m + 1, page - 2, 2, HURRAY_PAGES_AS_IS); /* no whole page inside */
  assert_int_equal(munmap(m, big + 2 * page), 0);

  /* Residency, on 16 fresh pages: the first and last are partly outside
   * the range and must stay untouched. */
  uint8_t *f = mmap(NULL, 16 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(f != MAP_FAILED);
  assert_int_equal(resident_pages(f, 16 * page, page), 0);
  hurray__prefault_write(f + 1, 16 * page - 2, 2, HURRAY_PAGES_AS_IS);
  size_t got = resident_pages(f, 16 * page, page);
#ifdef __linux__
  if (madvise(f + page, page, 23 /* MADV_POPULATE_WRITE */) == 0) {
    assert_int_equal(got, 14);
    assert_int_equal(resident_pages(f, page, page), 0);
    assert_int_equal(resident_pages(f + 15 * page, page, page), 0);
  }
#endif
  assert_true(got <= 14);
  assert_int_equal(munmap(f, 16 * page), 0);
}

/* Every page-size choice on a mapping the caller owns: content stays and
 * every whole page of the range is present, on 1 to 3 threads, for a range
 * with unaligned ends around whole 2 MiB steps (the probe's) and for one
 * shorter than two steps (populated as it is). */
static void test_prefault_write_page_choices(void **state) {
  (void)state;
  if (emulated()) skip();
  size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (size_t)24 << 20;
  const HurrayPageChoice choices[] = {HURRAY_PAGES_SMALL, HURRAY_PAGES_HUGE, HURRAY_PAGES_PROBE};
  for (size_t c = 0; c < sizeof choices / sizeof choices[0]; c++) {
    for (uint32_t threads = 1; threads <= 3; threads++) {
      for (size_t want = (size_t)3 << 20; want <= len; want += len - ((size_t)3 << 20)) {
        uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(m != MAP_FAILED);
        m[page + 77] = 5;
        hurray__prefault_write(m + 3 * page, want - 5 * page, threads, choices[c]);
        assert_int_equal(m[page + 77], 5);
        assert_int_equal(m[3 * page], 0);
        assert_int_equal(m[want - 2 * page - 1], 0);
#ifdef __linux__
        if (madvise(m, page, 23 /* MADV_POPULATE_WRITE */) == 0) {
          size_t n = (want - 5 * page) / page, present = 0;
          unsigned char *vec = malloc(n);
          assert_non_null(vec);
          assert_int_equal(mincore(m + 3 * page, n * page, vec), 0);
          for (size_t i = 0; i < n; i++) present += vec[i] & 1;
          free(vec);
          assert_int_equal(present, n);
        }
#endif
        assert_int_equal(munmap(m, len), 0);
      }
    }
  }
}

/* HURRAY_FRESH_PAGES names the choice; anything else is the probe. */
static void test_fresh_pages_choice_from_environment(void **state) {
  (void)state;
  const struct {
    const char *value;
    HurrayPageChoice want;
  } cases[] = {{"small", HURRAY_PAGES_SMALL}, {"huge", HURRAY_PAGES_HUGE},
               {"probe", HURRAY_PAGES_PROBE}, {"", HURRAY_PAGES_PROBE},
               {"Huge", HURRAY_PAGES_PROBE},  {NULL, HURRAY_PAGES_PROBE}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].value != NULL) {
      assert_int_equal(setenv("HURRAY_FRESH_PAGES", cases[i].value, 1), 0);
    } else {
      assert_int_equal(unsetenv("HURRAY_FRESH_PAGES"), 0);
    }
    assert_int_equal(hurray__fresh_pages_choice(), cases[i].want);
  }
}

/* ------------------------------------------------------- write pieces */

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)

/* What writing one buffer of `len` bytes at file offset `start` looks like:
 * each piece costs `small_ns_per_kib` per KiB when it is a small write and
 * `huge_ns_per_kib` when it is a 2 MiB one, on a clock that runs on from
 * `*clock`. Returns the number of pieces; their lengths in `pieces`. */
typedef struct Written {
  uint64_t pieces[512]; /* the first 512 */
  size_t count;
  size_t huge;              /* pieces of 2 MiB */
  uint64_t huge_region[64]; /* the first 64 of them, by region (offset / 2 MiB) */
} Written;

static void write_buffer(HurrayWritePieces *p, uint64_t start, uint64_t len, uint64_t small_cost,
                         uint64_t huge_cost, uint64_t *clock, Written *out) {
  memset(out, 0, sizeof *out);
  uint64_t at = start, left = len;
  while (left > 0) {
    uint64_t n = hurray__write_piece(p, at, left, *clock);
    assert_true(n > 0 && n <= left);
    /* Every piece ends on a 64 KiB boundary of the file or at the end of
     * the buffer, and a 2 MiB piece fills one aligned region. */
    assert_true((at + n) % HURRAY_WRITE_STEP == 0 || n == left);
    assert_true(n <= HURRAY_WRITE_STEP || (n == HURRAY_HUGE_WRITE_STEP && at % n == 0));
    *clock += (n == HURRAY_HUGE_WRITE_STEP ? huge_cost : small_cost) * (n / KIB);
    if (out->count < sizeof out->pieces / sizeof out->pieces[0]) out->pieces[out->count] = n;
    out->count++;
    if (n == HURRAY_HUGE_WRITE_STEP) {
      if (out->huge < 64) out->huge_region[out->huge] = at / HURRAY_HUGE_WRITE_STEP;
      out->huge++;
    }
    at += n;
    left -= n;
  }
}

/* Cheap huge writes: the first whole region is probed in small writes,
 * every later whole region goes out in one write, the head and the tail in
 * small ones. */
static void test_write_pieces_probe_keeps_cheap_huge_writes(void **state) {
  (void)state;
  HurrayWritePieces p;
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_PROBE);
  uint64_t clock = 0;
  Written w;
  /* 64 bytes in: the head runs to 2 MiB, regions [2, 4) probed, [4, 12)
   * huge, the tail 12 MiB + 64 .. 12 MiB + 64 + 100 KiB small. */
  write_buffer(&p, 64, 12 * MIB + 100 * KIB, 10, 10, &clock, &w);
  assert_int_equal(w.pieces[0], 64 * KIB - 64);
  assert_int_equal(w.huge, 4);
  for (size_t k = 0; k < w.count; k++) {
    if (w.pieces[k] == HURRAY_HUGE_WRITE_STEP) {
      assert_int_equal(w.pieces[k - 1], HURRAY_WRITE_STEP); /* the probe's last piece */
      for (size_t j = 0; j < 4; j++) assert_int_equal(w.pieces[k + j], HURRAY_HUGE_WRITE_STEP);
      break;
    }
  }
  /* The next buffer needs no probe: its first whole region is one write. */
  write_buffer(&p, 12 * MIB + 164 * KIB, 6 * MIB, 10, 10, &clock, &w);
  assert_int_equal(w.huge, 2); /* [14, 16) and [16, 18) */
}

/* A huge write markedly slower than the probe's small ones sends the
 * writer back to small writes for 1, then 2, 4 ... regions before each new
 * probe; one within the margin does not. */
static void test_write_pieces_probe_backs_off_when_slower(void **state) {
  (void)state;
  HurrayWritePieces p;
  uint64_t clock = 0;
  Written w;
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_PROBE);
  write_buffer(&p, 0, 16 * MIB, 10, 12, &clock, &w); /* 1.2x: within the margin */
  assert_int_equal(w.huge, 7);

  /* 3x, regions of 2 MiB: 0 probed, 1 huge (slow), 2 small, 3 probed, 4
   * huge, 5-6 small, 7 probed, 8 huge, 9-12 small, 13 probed, 14 huge,
   * 15 small (and 7 more regions of waiting to go). */
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_PROBE);
  write_buffer(&p, 0, 32 * MIB, 10, 30, &clock, &w);
  assert_int_equal(w.huge, 4);
  const uint64_t slow[] = {1, 4, 8, 14};
  for (size_t k = 0; k < 4; k++) assert_int_equal(w.huge_region[k], slow[k]);
  assert_int_equal(w.count, 4 + 32 * 12);

  /* The slow spell has passed: after the wait, a probe, then huge writes
   * again (regions 16-22 small, 23 probed, 24-31 huge). */
  write_buffer(&p, 32 * MIB, 32 * MIB, 10, 10, &clock, &w);
  assert_int_equal(w.huge, 8);
  assert_int_equal(w.huge_region[0], 24);

  /* A spell that lasts costs one slow write per at most 64 regions of
   * waiting, a probe and the write itself. */
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_PROBE);
  write_buffer(&p, 0, 1024 * MIB, 10, 30, &clock, &w);
  assert_true(w.huge >= 10 && w.huge <= 16);
  for (size_t k = 1; k < w.huge && k < 64; k++) {
    assert_true(w.huge_region[k] - w.huge_region[k - 1] <= 64 + 2);
  }
}

/* small: never a huge write; huge: from the first whole region, no probe. */
static void test_write_pieces_forced_choices(void **state) {
  (void)state;
  HurrayWritePieces p;
  uint64_t clock = 0;
  Written w;
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_SMALL);
  write_buffer(&p, 0, 8 * MIB, 10, 1, &clock, &w);
  assert_int_equal(w.huge, 0);
  assert_int_equal(w.count, 128);
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_HUGE);
  write_buffer(&p, 0, 8 * MIB, 1, 100, &clock, &w);
  assert_int_equal(w.huge, 4);
  assert_int_equal(w.count, 4);
  /* A region that is not whole within the buffer is never one write. */
  write_buffer(&p, 8 * MIB, 2 * MIB - 1, 1, 1, &clock, &w);
  assert_int_equal(w.huge, 0);
}

/* Gathered regions (the writer's shared 2 MiB regions): gathered whole
 * while huge writes are kept; the probe made on one when it is due; a
 * gathered 2 MiB write markedly slower than the probe sends the writer
 * back to small writes, and regions not gathered count down the wait. */
static void test_write_pieces_gathered_regions(void **state) {
  (void)state;
  HurrayWritePieces p;
  uint64_t clock = 0;
  Written w;
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_SMALL);
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_NO);
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_HUGE);
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_WHOLE);
  hurray__write_pieces_gathered(&p, HURRAY_GATHER_WHOLE, true, 1000000000); /* forced: kept */
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_WHOLE);

  /* Probed on a gathered region: 20,480 ns of small writes. */
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_PROBE);
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_PROBE);
  hurray__write_pieces_gathered(&p, HURRAY_GATHER_PROBE, true, 10 * 2048);
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_WHOLE);
  hurray__write_pieces_gathered(&p, HURRAY_GATHER_WHOLE, true, 12 * 2048); /* 1.2x: kept */
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_WHOLE);
  hurray__write_pieces_gathered(&p, HURRAY_GATHER_WHOLE, true, 30 * 2048); /* 3x */
  /* One region of small writes (this one, not gathered), then a probe. */
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_NO);
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_PROBE);
  /* Cut short by the end of the file: no probe; the next one is due. */
  hurray__write_pieces_gathered(&p, HURRAY_GATHER_PROBE, false, 1);
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_PROBE);
  hurray__write_pieces_gathered(&p, HURRAY_GATHER_PROBE, true, 10 * 2048);
  /* The probe holds for the regions inside buffers too. */
  write_buffer(&p, 8 * MIB, 8 * MIB, 10, 10, &clock, &w);
  assert_int_equal(w.huge, 4);

  /* A probe inside a buffer holds for gathered regions. */
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_PROBE);
  write_buffer(&p, 0, 8 * MIB, 10, 10, &clock, &w);
  assert_int_equal(hurray__write_pieces_gather(&p), HURRAY_GATHER_WHOLE);
}

/* A probe region whose end is not timed (another write moved the file on
 * before the next piece was asked for) decides nothing: the probe starts
 * again at the next whole region. */
static void test_write_pieces_untimed_probe_starts_again(void **state) {
  (void)state;
  HurrayWritePieces p;
  hurray__write_pieces_init(&p, HURRAY_WRITE_FOLIOS_PROBE);
  uint64_t clock = 0, at = 0;
  for (int k = 0; k < 31; k++) at += hurray__write_piece(&p, at, 8 * MIB - at, clock += 640);
  /* 64 KiB short of the region's end the buffer moves on 4 KiB further
   * than its pieces (padding written between them, say). */
  at += 4 * KIB;
  Written w;
  write_buffer(&p, at, 10 * MIB - 64 * KIB, 10, 10, &clock, &w);
  /* It ends 4 KiB past 12 MiB - 64 KiB: [2, 4) probed again, then [4, 6),
   * [6, 8) and [8, 10) in one write each. */
  assert_int_equal(w.huge, 3);
}

/* HURRAY_WRITE_FOLIOS names the choice; anything else is the probe. */
static void test_write_folios_choice_from_environment(void **state) {
  (void)state;
  const struct {
    const char *value;
    HurrayWriteFolios want;
  } cases[] = {{"small", HURRAY_WRITE_FOLIOS_SMALL}, {"huge", HURRAY_WRITE_FOLIOS_HUGE},
               {"probe", HURRAY_WRITE_FOLIOS_PROBE}, {"", HURRAY_WRITE_FOLIOS_PROBE},
               {"SMALL", HURRAY_WRITE_FOLIOS_PROBE}, {NULL, HURRAY_WRITE_FOLIOS_PROBE}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].value != NULL) {
      assert_int_equal(setenv("HURRAY_WRITE_FOLIOS", cases[i].value, 1), 0);
    } else {
      assert_int_equal(unsetenv("HURRAY_WRITE_FOLIOS"), 0);
    }
    assert_int_equal(hurray__write_folios_choice(), cases[i].want);
  }
}

static void names_of(const void *ctx, size_t index, const char **name, size_t *len) {
  *name = ((const char *const *)ctx)[index];
  *len = strlen(*name);
}

/* The hash was unseeded: names chosen so that their hashes share low bits
 * (cheap to find) made every probe walk one run, a quadratic save. Each set
 * draws its own seed, so no input knows where its names land; lookups
 * still find every name. */
static void test_name_sets_are_seeded(void **state) {
  (void)state;
  static const char *names[] = {"a", "b", "embed.weight", "lm_head.weight", ""};
  HurrayNameSet one = {0}, two = {0};
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(hurray__name_set_reserve(&one, i), HURRAY_OK);
    assert_int_equal(hurray__name_set_reserve(&two, i), HURRAY_OK);
    size_t *slot = hurray__name_set_slot(&one, names_of, names, names[i], strlen(names[i]));
    assert_int_equal(*slot, 0);
    *slot = i + 1;
    slot = hurray__name_set_slot(&two, names_of, names, names[i], strlen(names[i]));
    *slot = i + 1;
  }
  assert_true(one.seed != two.seed); /* two draws of 64 bits */
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(hurray__name_set_find(&one, names_of, names, names[i], strlen(names[i])),
                     i + 1);
    assert_int_equal(hurray__name_set_find(&two, names_of, names, names[i], strlen(names[i])),
                     i + 1);
  }
  assert_int_equal(hurray__name_set_find(&one, names_of, names, "c", 1), 0);
  hurray__name_set_free(&one);
  hurray__name_set_free(&two);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_name_sets_are_seeded),
      cmocka_unit_test(test_pack_unpack_round_trip),
      cmocka_unit_test(test_pack_layout_is_lsb_first),
      cmocka_unit_test(test_unpack_never_reads_past_the_input),
      cmocka_unit_test(test_member_extract_renumbers),
      cmocka_unit_test(test_prefault_write),
      cmocka_unit_test(test_prefault_write_page_choices),
      cmocka_unit_test(test_fresh_pages_choice_from_environment),
      cmocka_unit_test(test_write_pieces_probe_keeps_cheap_huge_writes),
      cmocka_unit_test(test_write_pieces_probe_backs_off_when_slower),
      cmocka_unit_test(test_write_pieces_forced_choices),
      cmocka_unit_test(test_write_pieces_gathered_regions),
      cmocka_unit_test(test_write_pieces_untimed_probe_starts_again),
      cmocka_unit_test(test_write_folios_choice_from_environment),
      cmocka_unit_test(test_populate_read_needs_linux_6_9),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
