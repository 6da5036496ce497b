/*
 * hurray - inspect hurray files.
 *
 *   hurray ls FILE                      one line per tensor
 *   hurray ls DIR                       the same for every *.hurray file in
 *                                       DIR (sorted), with each piece's shard
 *   hurray info [--json] FILE [NAME]    metadata and full descriptors
 *   hurray verify FILE                  check every checksum
 *   hurray cat [--npy] [--buffer N] FILE NAME
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
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "  verify FILE                   check the checksum of every buffer\n"
    "  cat [--npy] [--buffer N] FILE NAME\n"
    "                                write buffer N (default 0) of NAME to stdout;\n"
    "                                --npy writes a dense tensor as a .npy file\n"
    "  convert SRC DST [options]     convert safetensors, GGUF, .npz/.npy and torch\n"
    "                                checkpoints to and from hurray, optionally\n"
    "                                quantizing; 'hurray convert --help' for more\n"
    "\n"
    "options:\n"
    "  -h, --help                    show this help and exit\n"
    "  --version                     show the library version and exit\n"
    "\n"
    "exit status: 0 on success, 1 if the file is invalid or an operation fails,\n"
    "2 on a usage error.\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "hurray: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'hurray --help' for more information.\n");
  return EXIT_USAGE;
}

/* convert reads formats that need their own ecosystems (torch pickles,
 * GGUF, safetensors), so it lives in the Python package: this command
 * hands over to `python3 -m hurray convert` (HURRAY_PYTHON names another
 * interpreter), keeping one `hurray` tool with one set of subcommands. */
static int run_convert(int argc, char **argv) {
  const char *python = getenv("HURRAY_PYTHON");
  if (python == NULL || python[0] == '\0') python = "python3";
  char **args = calloc((size_t)argc + 3, sizeof *args);
  if (args == NULL) {
    fprintf(stderr, "hurray: out of memory\n");
    return EXIT_FAILURE;
  }
  args[0] = (char *)python;
  args[1] = "-m";
  args[2] = "hurray";
  for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
  execvp(python, args);
  fprintf(stderr,
          "hurray: convert needs the hurray Python package, and running '%s' failed: %s\n"
          "Install it with 'pip install .' (or set HURRAY_PYTHON to its interpreter).\n",
          python, strerror(errno));
  free(args);
  return EXIT_FAILURE;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *command = argv[1];
  if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 ||
      strcmp(command, "help") == 0) {
    fputs(usage_text, stdout);
    return EXIT_SUCCESS;
  }
  if (strcmp(command, "--version") == 0) {
    printf("hurray %s (C ABI %u, file format %d.%d)\n", hurray_version_string(),
           hurray_abi_version(), HURRAY_FILE_FORMAT_MAJOR, HURRAY_FILE_FORMAT_MINOR);
    return EXIT_SUCCESS;
  }
  if (strcmp(command, "convert") == 0) return run_convert(argc, argv);
  bool json = false, npy = false;
  long buffer_index = 0;
  const char *positional[3] = {NULL, NULL, NULL};
  int npos = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage_text, stdout);
      return EXIT_SUCCESS;
    } else if (strcmp(argv[i], "--json") == 0 && strcmp(command, "info") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--npy") == 0 && strcmp(command, "cat") == 0) {
      npy = true;
    } else if (strcmp(argv[i], "--buffer") == 0 && strcmp(command, "cat") == 0) {
      char *end = NULL;
      if (i + 1 >= argc || (buffer_index = strtol(argv[i + 1], &end, 10), *end != '\0')) {
        return usage_error("--buffer needs a number%s", "");
      }
      i++;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return usage_error("unknown option '%s'", argv[i]);
    } else if (npos < 3) {
      positional[npos++] = argv[i];
    } else {
      return usage_error("too many arguments starting at '%s'", argv[i]);
    }
  }
  if (strcmp(command, "ls") == 0 || strcmp(command, "verify") == 0) {
    if (npos != 1) return usage_error("%s takes exactly one FILE", command);
    return command[0] == 'l' ? hurray_cli_ls(stdout, stderr, positional[0])
                              : hurray_cli_verify(stdout, stderr, positional[0]);
  }
  if (strcmp(command, "info") == 0) {
    if (npos < 1 || npos > 2) return usage_error("info takes FILE [NAME]%s", "");
    return hurray_cli_info(stdout, stderr, positional[0], positional[1], json);
  }
  if (strcmp(command, "cat") == 0) {
    if (npos != 2) return usage_error("cat takes FILE NAME%s", "");
    return hurray_cli_cat(stdout, stderr, positional[0], positional[1], buffer_index, npy);
  }
  return usage_error("unknown command '%s'", command);
}
