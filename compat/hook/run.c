/* iofiber-run [--threads N] [--follow-exec] [--] PROGRAM ARGS...
 *
 * Runs an unmodified dynamically linked program on fibers: preloads
 * libiofiber-hook (ahead of any LD_PRELOAD already set), sets IOF_RUN=1 so
 * the hook runs the program's main in a fiber, and execs PROGRAM. The hook
 * is looked up in IOF_HOOK_LIB, then next to this executable (build tree),
 * then in the install tree's library directory relative to it. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef IOF_RUN_LIBDIR_REL
#define IOF_RUN_LIBDIR_REL "../lib"
#endif
#define HOOK_NAME "libiofiber-hook.so.0"

static void usage(FILE *to) {
  fputs("usage: iofiber-run [--threads N] [--follow-exec] [--] PROGRAM "
        "[ARGS...]\n"
        "  --threads N    run fibers on N io threads (default: IOF_THREADS,\n"
        "                 else 1)\n"
        "  --follow-exec  programs it execs run on fibers too\n"
        "  IOF_HOOK_VERBOSE=1 reports per-call counters at exit.\n",
        to);
}

/* dir of /proc/self/exe, without the trailing slash; false if unknown. */
static bool self_dir(char *out, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", out, cap - 1);
  if (n <= 0) return false;
  out[n] = '\0';
  char *slash = strrchr(out, '/');
  if (!slash) return false;
  *slash = '\0';
  return true;
}

static bool find_hook(char *out, size_t cap) {
  const char *env = getenv("IOF_HOOK_LIB");
  if (env && *env) {
    if ((size_t)snprintf(out, cap, "%s", env) >= cap) return false;
    return access(out, R_OK) == 0;
  }
  char dir[PATH_MAX];
  if (!self_dir(dir, sizeof dir)) return false;
  const char *cands[] = {"", "/" IOF_RUN_LIBDIR_REL};
  for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
    char p[PATH_MAX + 64], d[PATH_MAX];
    if ((size_t)snprintf(p, sizeof p, "%s%s", dir, cands[i]) >= sizeof p)
      continue;
    /* The directory made canonical, the soname kept (not its target). */
    if (!realpath(p, d)) continue;
    if ((size_t)snprintf(out, cap, "%s/%s", d, HOOK_NAME) >= cap) continue;
    if (access(out, R_OK) == 0) return true;
  }
  return false;
}

/* PROGRAM's path as execvp would find it; false if not found. */
static bool resolve(const char *prog, char *out, size_t cap) {
  if (strchr(prog, '/'))
    return (size_t)snprintf(out, cap, "%s", prog) < cap &&
           access(out, X_OK) == 0;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    if ((size_t)snprintf(out, cap, "%.*s%s%s", (int)n, p, n ? "/" : "", prog) <
            cap &&
        access(out, X_OK) == 0)
      return true;
    p += n;
    if (*p) p++;
  }
  return false;
}

/* Warns when the hook cannot act: a static executable (no PT_INTERP: no
 * dynamic loader, nothing interposed) or a setuid/setgid one (the loader
 * ignores LD_PRELOAD paths for it). The program still runs, plain. */
static void warn_if_plain(const char *prog) {
  char path[PATH_MAX];
  if (!resolve(prog, path, sizeof path)) return;
  struct stat st;
  if (stat(path, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)) &&
      (st.st_uid != getuid() || st.st_gid != getgid()))
    fprintf(stderr,
            "iofiber-run: %s is setuid/setgid: it runs without the "
            "hook\n",
            prog);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  Elf64_Ehdr eh;
  if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh &&
      !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
      eh.e_ident[EI_CLASS] == ELFCLASS64 &&
      eh.e_phentsize == sizeof(Elf64_Phdr)) {
    bool interp = false;
    for (unsigned i = 0; i < eh.e_phnum && !interp; i++) {
      Elf64_Phdr ph;
      if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) !=
          (ssize_t)sizeof ph)
        break;
      interp = ph.p_type == PT_INTERP;
    }
    if (!interp)
      fprintf(stderr,
              "iofiber-run: %s is statically linked: it runs "
              "without the hook\n",
              prog);
  }
  close(fd);
}

int main(int argc, char **argv) {
  unsigned long threads = 0; /* not given: IOF_THREADS, else 1 */
  bool follow = false;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) {
      i++;
      break;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--follow-exec")) {
      follow = true;
    } else if (!strcmp(a, "--threads") || !strncmp(a, "--threads=", 10)) {
      const char *v = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : "");
      char *end;
      errno = 0;
      threads = strtoul(v, &end, 10);
      if (errno || !*v || *end || threads < 1 || threads > 1024) {
        fprintf(stderr, "iofiber-run: --threads wants 1..1024, got '%s'\n", v);
        return 2;
      }
    } else if (a[0] == '-' && a[1] == '-') {
      fprintf(stderr, "iofiber-run: unknown option %s\n", a);
      usage(stderr);
      return 2;
    } else {
      break;
    }
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }

  char hook[PATH_MAX];
  if (!find_hook(hook, sizeof hook)) {
    fprintf(stderr,
            "iofiber-run: cannot find %s (set IOF_HOOK_LIB to its path)\n",
            HOOK_NAME);
    return 127;
  }
  const char *old = getenv("LD_PRELOAD");
  size_t need = strlen(hook) + (old && *old ? strlen(old) + 1 : 0) + 1;
  char *pre = malloc(need);
  if (!pre) return 127;
  if (old && *old)
    snprintf(pre, need, "%s:%s", hook, old);
  else
    snprintf(pre, need, "%s", hook);
  char nthreads[24];
  snprintf(nthreads, sizeof nthreads, "%lu", threads ? threads : 1);
  if (setenv("LD_PRELOAD", pre, 1) || setenv("IOF_RUN", "1", 1) ||
      setenv("IOF_THREADS", nthreads, threads != 0) ||
      (follow ? setenv("IOF_FOLLOW_EXEC", "1", 1)
              : unsetenv("IOF_FOLLOW_EXEC"))) {
    perror("iofiber-run: setenv");
    return 127;
  }
  free(pre);
  warn_if_plain(argv[i]);
  execvp(argv[i], argv + i);
  int e = errno;
  fprintf(stderr, "iofiber-run: %s: %s\n", argv[i], strerror(e));
  return e == ENOENT ? 127 : 126;
}
