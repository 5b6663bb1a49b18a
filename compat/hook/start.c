/* Taking over main under iofiber-run: the hook wraps __libc_start_main and,
 * when IOF_RUN=1 is in the environment, hands libc a main that runs the
 * program's main in a fiber (its pthreads then become fibers too, see
 * compat's pthread_create). Without the flag nothing changes: a program
 * that links the hook keeps its own main on its own thread. */
#include "compat/hook/hook_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/compat_thread.h>

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

/* main runs as compat's first fiber thread (iof_main_ex): pthread_self and
 * pthread_exit work in it, and the pthreads it creates become fibers,
 * round-robin over IOF_THREADS io threads. When main returns, the fiber
 * calls exit with its value: fibers still running end with the process, as
 * threads do, after the exit handlers ran among them. */
typedef struct main_call {
  int argc;
  char **argv;
  char **envp;
  int status;
  bool ran;
} main_call;

static int main_fiber(void *p) {
  main_call *c = p;
  c->ran = true;
  c->status = user_main(c->argc, c->argv, c->envp);
  /* Returning from main is exit(status), made here, while the fibers still
   * run: atexit handlers and library destructors may join "threads" (libuv's
   * thread pool in node does), which must be able to finish. */
  exit(c->status);
}

static int run_main(int argc, char **argv, char **envp) {
  if (!env_is_1(IOF_HOOK_ENV_FOLLOW)) {
    unsetenv(IOF_HOOK_ENV_RUN);
    unsetenv(IOF_HOOK_ENV_THREADS);
    scrub_preload();
  }
  main_call c = {argc, argv, envp, 0, false};
  iof_main_opts o = {.threads = io_threads};
  int r = iof_main_ex(main_fiber, &c, &o);
  if (!c.ran) {
    fprintf(stderr,
            "iofiber-run: cannot run main on fibers (%s); running it on its "
            "thread\n",
            strerror(r < 0 ? -r : EINVAL));
    return user_main(argc, argv, envp);
  }
  return c.status;
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
