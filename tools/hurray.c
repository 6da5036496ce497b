/*
 * hurray - inspect hurray files.
 *
 *   hurray ls FILE                      one line per tensor
 *   hurray ls DIR                       the same for every *.hurray file in
 *                                       DIR (sorted), with each piece's shard
 *   hurray info [--json] FILE [NAME]    metadata and full descriptors
 *   hurray verify FILE                  check every checksum, and every tensor reads
 *   hurray cat [--npy] [--buffer N] [--no-verify] [--force] FILE NAME
 *                                       raw bytes of one buffer, or .npy
 *   hurray convert SRC DST [options]    to and from safetensors, GGUF, .npz,
 *                                       torch; runs the Python package
 *
 * The commands themselves are in tools/cli_*.c (tools/cli.h), so that the
 * fuzz harness fuzz/fuzz_cli.c runs exactly what this tool runs.
 *
 * Exit status: 0 success, 1 the file is bad or an operation failed,
 * 2 usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "hurray/hurray.h"

#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: hurray <command> [options] FILE [NAME]\n"
    "\n"
    "commands:\n"
    "  ls FILE                       list tensors: name, dtype, shape, layout,\n"
    "                                quantization, stored bytes and statistics\n"
    "  ls DIR                        the same for every *.hurray file in DIR (a\n"
    "                                sharded or DCP checkpoint), with each shard\n"
    "  info [--json] FILE [NAME]     print file metadata and full descriptors\n"
    "                                (all tensors, or only NAME)\n"
    "  verify FILE                   check every checksum and that every tensor reads\n"
    "  cat [--npy] [--buffer N] [--no-verify] [--force] FILE NAME\n"
    "                                write buffer N (default 0) of NAME to stdout,\n"
    "                                once NAME's checksums match (--no-verify\n"
    "                                writes a damaged tensor's bytes anyway);\n"
    "                                --npy writes a dense tensor as a .npy file;\n"
    "                                refused on a terminal unless --force\n"
    "  convert SRC DST [options]     convert safetensors, GGUF, .npz/.npy and torch\n"
    "                                checkpoints to and from hurray, optionally\n"
    "                                quantizing; 'hurray convert --help' for more\n"
    "\n"
    "ls, info and verify also take a URL for FILE in the pip-installed command:\n"
    "http(s):// with urllib3 (pip install urllib3, the 'remote' extra), s3://\n"
    "and other fsspec URLs with fsspec (the 'fsspec' extra).\n"
    "\n"
    "options:\n"
    "  -h, --help                    show this help and exit\n"
    "  --version                     show the library version and exit\n"
    "  --                            what follows is a FILE or NAME, even if it\n"
    "                                starts with -\n"
    "\n"
    "exit status: 0 on success, 1 if the file is invalid or an operation fails,\n"
    "2 on a usage error.\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "hurray: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'hurray --help' for more information.\n");
  return EXIT_USAGE;
}

/* An existing folder is never a file to the native converter, whatever its
 * name says: "m.safetensors/" is a model folder for Python to read, or a
 * folder target for Python to refuse or write into. */
static bool is_folder(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool same_file(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static int compare_strings(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "note: N metadata keys not carried (WHY): a, b, c (+k more)", as the
 * Python converter prints it: the count and the first three keys in sorted
 * order. */
static void print_dropped_note(const char **keys, size_t n, const char *why) {
  if (n == 0) return;
  qsort(keys, n, sizeof *keys, compare_strings);
  printf("note: %zu metadata key%s not carried (%s): ", n, n == 1 ? "" : "s", why);
  for (size_t i = 0; i < n && i < 3; i++) {
    if (i > 0) fputs(", ", stdout);
    hurray_cli_puts_escaped(stdout, keys[i]);
  }
  if (n > 3) printf(" (+%zu more)", n - 3);
  putchar('\n');
}

/* The notes the Python converter prints for source metadata the target
 * does not get: keys its format cannot hold, and keys a hurray source
 * leaves behind (hurray_source_left_metadata_key). Read from the source
 * itself, as hurray_convert_file reads it. */
static void note_dropped_metadata(const char *src, HurrayFormat tf) {
  HurraySourceOptions options = HURRAY_SOURCE_OPTIONS_INIT;
  options.verify_checksums = false; /* the conversion checked them */
  HurraySource *s = NULL;
  HurrayError error = {0};
  const char **keys = NULL;
  size_t count = 0, n = 0, left = 0;
  if (hurray_source_open(src, HURRAY_FORMAT_UNKNOWN, &options, &s, &error) == HURRAY_OK) {
    count = hurray_source_metadata_count(s);
    left = hurray_source_left_metadata_count(s);
    keys = calloc(count + left > 0 ? count + left : 1, sizeof *keys);
  }
  if (keys == NULL) { /* the target is written; only the list of what it left out is lost */
    printf("note: could not list the metadata keys left out: %s\n",
           s == NULL ? error.message : "out of memory");
    hurray_source_close(s);
    return;
  }
  for (size_t i = 0; tf != HURRAY_FORMAT_HURRAY && i < count; i++) {
    const char *key;
    HurrayMetadataType type;
    const void *value;
    size_t len;
    if (hurray_source_metadata(s, i, &key, &type, &value, &len, &error) == HURRAY_OK &&
        !hurray_format_keeps_metadata(tf, key)) {
      keys[n++] = key;
    }
  }
  print_dropped_note(keys, n,
                     tf == HURRAY_FORMAT_SAFETENSORS
                         ? "safetensors keeps only its own __metadata__, the hurray keys "
                           "safetensors.*"
                         : "GGUF carries only its own key-value pairs, the hurray keys gguf.*");
  for (size_t i = 0; i < left; i++) keys[i] = hurray_source_left_metadata_key(s, i);
  print_dropped_note(keys, left,
                     "the reserved chunk-checksum key, or types of a newer file format "
                     "version, which this version does not write");
  free(keys);
  hurray_source_close(s);
}

/* The signal that interrupted a native conversion, 0 while none has. The
 * handler only records it: the conversion's cancel hook sees it, the
 * writer removes its temporary file and leaves the target untouched, and
 * the command exits 128 + the signal, as the Python converter does. A
 * second signal ends the process at once. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int signum) {
  if (interrupted != 0) {
    signal(signum, SIG_DFL);
    raise(signum); /* delivered when this handler returns */
    return;
  }
  interrupted = signum;
}

static bool conversion_cancelled(void *ctx) {
  (void)ctx;
  return interrupted != 0;
}

/* Ctrl-C, SIGTERM and SIGHUP, where they would end the process (one the
 * caller ignores, nohup's SIGHUP say, stays ignored). exec, which hands a
 * conversion over to Python, puts caught signals back to the default. */
static void catch_interrupts(void) {
  struct sigaction on = {0};
  on.sa_handler = on_interrupt;
  on.sa_flags = SA_RESTART;
  sigemptyset(&on.sa_mask);
  static const int which[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof which / sizeof which[0]; i++) {
    struct sigaction old;
    if (sigaction(which[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
      sigaction(which[i], &on, NULL);
    }
  }
}

/* Whether a failure to write stdout was reported already, in the words
 * of the command that met it. */
static bool stdout_failure_said = false;

/* hurray, safetensors and GGUF convert natively (hurray_convert_file):
 * no Python. Returns -1 when the conversion is not one of those (another
 * format, an option only the Python converter has, or a tensor that needs
 * a change of form, e.g. dequantizing into safetensors): the caller then
 * hands over to Python. Nothing is written in that case. */
typedef struct NativeConvertArgs {
  const char *src, *dst;
  bool quiet, stats, verify;
} NativeConvertArgs;

/* convert's arguments, when they are only those the native path takes:
 * two operands and -q, --stats, --no-verify, "--". */
static bool native_convert_args(int argc, char **argv, NativeConvertArgs *a) {
  *a = (NativeConvertArgs){.verify = true};
  bool operands_only = false;
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i];
    bool option = !operands_only && arg[0] == '-' && arg[1] != '\0';
    if (!option) {
      if (a->dst != NULL) return false;
      *(a->src == NULL ? &a->src : &a->dst) = arg;
    } else if (strcmp(arg, "--") == 0) {
      operands_only = true; /* as argparse does */
    } else if (strcmp(arg, "-q") == 0 || strcmp(arg, "--quiet") == 0) {
      a->quiet = true;
    } else if (strcmp(arg, "--stats") == 0) {
      a->stats = true;
    } else if (strcmp(arg, "--no-verify") == 0) {
      a->verify = false;
    } else {
      return false; /* Python's options */
    }
  }
  return true;
}

static int try_native_convert(int argc, char **argv) {
  NativeConvertArgs a;
  if (!native_convert_args(argc, argv, &a)) return -1;
  const char *src = a.src, *dst = a.dst;
  bool quiet = a.quiet, stats = a.stats, verify = a.verify;
  /* A target that is the source is a usage error, which Python reports
   * (exit status 2) as it does every other. */
  if (src == NULL || dst == NULL || is_folder(src) || is_folder(dst) || same_file(src, dst)) {
    return -1;
  }
  HurrayFormat sf = hurray_format_from_path(src), tf = hurray_format_from_path(dst);
  if (sf == HURRAY_FORMAT_UNKNOWN || tf == HURRAY_FORMAT_UNKNOWN) return -1;
  HurrayConvertOptions options = HURRAY_CONVERT_OPTIONS_INIT;
  options.verify_checksums = verify;
  options.statistics = stats && tf == HURRAY_FORMAT_HURRAY;
  options.cancel = conversion_cancelled;
  catch_interrupts();
  HurrayError error = {0};
  HurrayStatus status = hurray_convert_file(src, dst, &options, &error);
  if (interrupted != 0 && status != HURRAY_OK) {
    /* cancelled: dst untouched. A signal after the last moment a cancel
     * could keep it so is too late: the target is written, and reported. */
    fputs("hurray convert: interrupted\n", stderr);
    return 128 + interrupted;
  }
  if (status == HURRAY_ERR_UNSUPPORTED && getenv("HURRAY_CONVERT_NATIVE_ONLY") == NULL) {
    return -1; /* dst untouched; Python can change the tensors' form */
  }
  if (status != HURRAY_OK) {
    char *nl = strchr(error.message, '\n');
    if (nl != NULL) *nl = '\0';
    fputs("hurray convert: ", stderr);
    if (strstr(error.message, src) == NULL && strstr(error.message, dst) == NULL) {
      /* A message that names neither file ("not a hurray file", "a tensor
       * name GGUF readers refuse") is the source's or the target's: both
       * are named, since which one is not known here. */
      hurray_cli_puts_escaped(stderr, src);
      fputs(" -> ", stderr);
      hurray_cli_puts_escaped(stderr, dst);
      fputs(": ", stderr);
    }
    hurray_cli_puts_message(stderr, error.message); /* names from the file */
    if (status == HURRAY_ERR_CHECKSUM) {
      /* as the Python converter says it */
      fputs("; the file is damaged (--no-verify converts it anyway)", stderr);
    }
    fputc('\n', stderr);
    return EXIT_FAILURE;
  }
  if (!quiet) {
    printf("%s -> %s: ", hurray_format_name(sf), hurray_format_name(tf));
    hurray_cli_puts_escaped(stdout, dst);
    printf(" (native)\n");
    note_dropped_metadata(src, tf);
    if (stats && tf != HURRAY_FORMAT_HURRAY) {
      printf("note: --stats applies to .hurray targets; ignored\n"); /* as Python says it */
    }
  }
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) {
    /* Said here, as the Python converter says it: a bare "writing to
     * stdout failed" with exit status 1 read as if the target were not
     * written. */
    fputs("hurray convert: ", stderr);
    hurray_cli_puts_escaped(stderr, dst);
    fprintf(stderr, " was written, but printing its report failed: %s\n",
            errno != 0 ? strerror(errno) : "write error");
    stdout_failure_said = true;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}

/* Everything else convert does (torch pickles, npz, quantizing on the way,
 * reports) lives in the Python package: this command hands over to
 * `PYTHON -m hurray convert`, keeping one `hurray` tool with
 * one set of subcommands. PYTHON is HURRAY_PYTHON (the `hurray` command pip
 * installs sets it to the interpreter that installed the package), else the
 * interpreter this build was configured with, else python3 from PATH. */
#ifndef HURRAY_DEFAULT_PYTHON
#  define HURRAY_DEFAULT_PYTHON "python3"
#endif

/* What `-m hurray` does, except that it leaves the current directory off
 * sys.path (a hurray/ folder there must not run) and that an interpreter
 * without the package fails with one line saying what to do. */
static const char convert_bootstrap[] =
    "import sys\n"
    "if sys.path and sys.path[0] in ('', '.'): del sys.path[0]\n"
    "try:\n"
    "    import hurray\n"
    "except ImportError as e:\n"
    "    sys.exit('hurray convert: %s cannot import the hurray Python package (%s); '\n"
    "             'install it there (pip install . in the hurray source tree), or set '\n"
    "             'HURRAY_PYTHON to a Python that has it' % (sys.executable, e))\n"
    "import runpy\n"
    "runpy.run_module('hurray', run_name='__main__', alter_sys=True)\n";

static int run_convert(int argc, char **argv) {
  int native = try_native_convert(argc, argv);
  if (native >= 0) return native;
  const char *python = getenv("HURRAY_PYTHON");
  if (python == NULL || python[0] == '\0') {
    python = access(HURRAY_DEFAULT_PYTHON, X_OK) == 0 ? HURRAY_DEFAULT_PYTHON : "python3";
  }
  char **args = calloc((size_t)argc + 3, sizeof *args);
  if (args == NULL) {
    fprintf(stderr, "hurray: out of memory\n");
    return EXIT_FAILURE;
  }
  args[0] = (char *)python;
  args[1] = "-c";
  args[2] = (char *)convert_bootstrap;
  for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
  /* Ctrl-C, SIGTERM and SIGHUP stay pending, blocked, until Python's
   * converter can report them (hurray/__main__.py unblocks them inside its
   * try): one that came while Python imported its packages printed a
   * traceback, or numpy's "check your installation", instead of
   * "interrupted". A mask survives exec; one caught already is reported. */
  sigset_t held, before;
  sigemptyset(&held);
  sigaddset(&held, SIGINT);
  sigaddset(&held, SIGTERM);
  sigaddset(&held, SIGHUP);
  sigprocmask(SIG_BLOCK, &held, &before);
  if (interrupted != 0) {
    free(args);
    fputs("hurray convert: interrupted\n", stderr);
    return 128 + interrupted;
  }
  execvp(python, args);
  int failed = errno;
  sigprocmask(SIG_SETMASK, &before, NULL);
  fprintf(stderr,
          "hurray convert: cannot run the Python interpreter '%s' (%s); set HURRAY_PYTHON to "
          "a Python that has the hurray package\n",
          python, strerror(failed));
  free(args);
  return EXIT_FAILURE;
}

/* `code`, unless what went to stdout did not all arrive (a full disk, a
 * closed descriptor): then a failure, said on stderr. */
static int stdout_checked(int code) {
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) {
    if (!stdout_failure_said) hurray_cli_fail_stdout(stderr);
    return code == EXIT_SUCCESS ? EXIT_FAILURE : code;
  }
  return code;
}

/* help, -h/--help and --version: their exit status, or -1 for a command. */
static int run_top_level(int argc, char **argv) {
  const char *command = argv[1];
  if (strcmp(command, "help") == 0 && argc > 2 && strcmp(argv[2], "convert") == 0) {
    static char convert_word[] = "convert", help_word[] = "--help";
    char *convert_help[] = {argv[0], convert_word, help_word, NULL};
    return stdout_checked(run_convert(3, convert_help));
  }
  if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 ||
      strcmp(command, "help") == 0) {
    fputs(usage_text, stdout);
    return stdout_checked(EXIT_SUCCESS);
  }
  if (strcmp(command, "--version") == 0) {
    printf("hurray %s (C ABI %u, file format %d.%d)\n", hurray_version_string(),
           hurray_abi_version(), HURRAY_FILE_FORMAT_MAJOR, HURRAY_FILE_FORMAT_MINOR);
    return stdout_checked(EXIT_SUCCESS);
  }
  return -1;
}

int main(int argc, char **argv) {
  /* Past a file-size limit a write fails with EFBIG, which every command
   * reports (and the writer cleans up after), rather than killing the
   * process mid-write with no word and its temporary file left behind.
   * Python, which convert may exec, ignores it too. */
  signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *command = argv[1];
  int top = run_top_level(argc, argv);
  if (top >= 0) return top;
  if (strcmp(command, "convert") == 0) return stdout_checked(run_convert(argc, argv));
  if (strcmp(command, "ls") != 0 && strcmp(command, "info") != 0 &&
      strcmp(command, "verify") != 0 && strcmp(command, "cat") != 0) {
    return usage_error("unknown command '%s'", command);
  }
  bool json = false, npy = false, force = false, verify = true, options = true;
  long buffer_index = 0;
  const char *positional[3] = {NULL, NULL, NULL};
  int npos = 0;
  for (int i = 2; i < argc; i++) {
    if (!options || argv[i][0] != '-' || argv[i][1] == '\0') {
      if (npos == 3) return usage_error("too many arguments starting at '%s'", argv[i]);
      positional[npos++] = argv[i];
    } else if (strcmp(argv[i], "--") == 0) {
      options = false; /* what follows is a FILE or NAME, even "-x" */
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage_text, stdout);
      return stdout_checked(EXIT_SUCCESS);
    } else if (strcmp(argv[i], "--json") == 0 && strcmp(command, "info") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--npy") == 0 && strcmp(command, "cat") == 0) {
      npy = true;
    } else if (strcmp(argv[i], "--force") == 0 && strcmp(command, "cat") == 0) {
      force = true;
    } else if (strcmp(argv[i], "--no-verify") == 0 && strcmp(command, "cat") == 0) {
      verify = false;
    } else if (strcmp(argv[i], "--buffer") == 0 && strcmp(command, "cat") == 0) {
      char *end = NULL;
      errno = 0;
      if (i + 1 >= argc || argv[i + 1][0] < '0' || argv[i + 1][0] > '9' ||
          (buffer_index = strtol(argv[i + 1], &end, 10), *end != '\0') || errno == ERANGE) {
        return usage_error("--buffer needs a number%s", "");
      }
      i++;
    } else {
      return usage_error("unknown option '%s' (put -- before a FILE or NAME that starts with -)",
                         argv[i]);
    }
  }
  if (strcmp(command, "ls") == 0 || strcmp(command, "verify") == 0) {
    if (npos != 1) return usage_error("%s takes exactly one FILE", command);
    return stdout_checked(command[0] == 'l' ? hurray_cli_ls(stdout, stderr, positional[0])
                                            : hurray_cli_verify(stdout, stderr, positional[0]));
  }
  if (strcmp(command, "info") == 0) {
    if (npos < 1 || npos > 2) return usage_error("info takes FILE [NAME]%s", "");
    return stdout_checked(hurray_cli_info(stdout, stderr, positional[0], positional[1], json));
  }
  if (strcmp(command, "cat") == 0) {
    if (npos != 2) return usage_error("cat takes FILE NAME%s", "");
    /* Raw tensor bytes on a terminal are noise at best, and control
     * sequences that change the terminal at worst (zstd refuses too). */
    if (!force && isatty(fileno(stdout))) {
      return usage_error(
          "cat writes binary data and stdout is a terminal; redirect it (hurray "
          "cat FILE NAME > out.bin) or pass --force%s",
          "");
    }
    return hurray_cli_cat(stdout, stderr, positional[0], positional[1], buffer_index, npy, verify);
  }
  return usage_error("unknown command '%s'", command); /* not reached: checked above */
}
