/* Taking over main under iofiber-run: the hook wraps __libc_start_main and,
 * when IOF_RUN=1 is in the environment, hands libc a main that runs the
 * program's main in a fiber (its pthreads then become fibers too, see
 * compat's pthread_create). Without the flag nothing changes: a program
 * that links the hook keeps its own main on its own thread. */
#include "compat/hook/hook_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/io_context.h>
#include <iofiber/launch.h>

#if __has_include(<iofiber/compat_thread.h>)
#include <iofiber/compat_thread.h>
#endif

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void),
                        void (*)(void), void *);

static main_fn user_main;
static unsigned io_threads = 1;

static bool env_is_1(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "1") == 0;
}

/* Removes the hook from LD_PRELOAD (entries named libiofiber-hook*), so
 * programs this one execs start plain. */
static void scrub_preload(void) {
  const char *old = getenv("LD_PRELOAD");
  if (!old) return;
  size_t len = strlen(old);
  char *out = malloc(len + 1);
  if (!out) return;
  size_t n = 0;
  const char *p = old;
  while (*p) {
    size_t w = strcspn(p, " :");
    if (w) {
      const char *slash = memrchr(p, '/', w);
      const char *base = slash ? slash + 1 : p;
      size_t blen = w - (size_t)(base - p);
      static const char tag[] = "libiofiber-hook";
      bool ours = blen >= sizeof tag - 1 && !memcmp(base, tag, sizeof tag - 1);
      if (!ours) {
        if (n) out[n++] = ':';
        memcpy(out + n, p, w);
        n += w;
      }
    }
    p += w;
    if (*p) p++;
  }
  out[n] = '\0';
  if (n)
    setenv("LD_PRELOAD", out, 1);
  else
    unsetenv("LD_PRELOAD");
  free(out);
}

/* Fallback while compat offers no iof_main: one io_context on this thread,
 * main in a fiber with a thread-sized stack (touched pages only), and the
 * process ends when main returns, as it does with threads. */
typedef struct main_call {
  int argc;
  char **argv;
  char **envp;
} main_call;

static int main_fiber(void *p) {
  main_call *c = p;
  exit(user_main(c->argc, c->argv, c->envp));
}

static int run_main(int argc, char **argv, char **envp) {
  if (!env_is_1(IOF_HOOK_ENV_FOLLOW)) {
    unsetenv(IOF_HOOK_ENV_RUN);
    unsetenv(IOF_HOOK_ENV_THREADS);
    scrub_preload();
  }
  main_call c = {argc, argv, envp};
  iof_io_context *io = iof_io_context_create();
  if (!io) {
    fputs("iofiber-run: cannot create an io_context; running main on its "
          "thread\n",
          stderr);
    return user_main(argc, argv, envp);
  }
  iof_launch_opts o = {.stack_size = (size_t)8 << 20, .name = "main"};
  int r = iof_run_async(iof_io_context_executor(io), &o, main_fiber, &c);
  if (r < 0) {
    fprintf(stderr, "iofiber-run: cannot launch main: %s\n", strerror(-r));
    return user_main(argc, argv, envp);
  }
  r = iof_io_context_run(io);
  fprintf(stderr,
          "iofiber-run: the io_context stopped before main returned"
          " (%d)\n",
          r);
  return 70;
}

IOF_HOOK_API int __libc_start_main(main_fn main, int argc, char **argv,
                                   void (*init)(void), void (*fini)(void),
                                   void (*rtld_fini)(void), void *stack_end) {
  start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
  if (!real) {
    static const char m[] = "iofiber-hook: no __libc_start_main\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(127);
  }
  if (env_is_1(IOF_HOOK_ENV_RUN)) {
    const char *t = getenv(IOF_HOOK_ENV_THREADS);
    if (t && *t) {
      unsigned long v = strtoul(t, NULL, 10);
      if (v >= 1 && v <= 1024) io_threads = (unsigned)v;
    }
    user_main = main;
    main = run_main;
  }
  return real(main, argc, argv, init, fini, rtld_fini, stack_end);
}
