/* hook-fetch: plain blocking POSIX client code (getaddrinfo, connect,
 * write, read) run in many fibers at once. Nothing here knows about
 * fibers except main, which launches them: the program links
 * libiofiber-hook (CMake iofiber::hook, pkg-config iofiber-hook), so each
 * blocking call made by a fiber suspends only that fiber.
 *
 *   hook-fetch HOST PORT [--count N] [--path PATH]
 *
 * Sends N HTTP/1.0 GET requests concurrently, prints one line per status
 * seen and the elapsed time. IOF_HOOK_VERBOSE=1 shows which calls went
 * through the fiber layer. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/iofiber.h>

static const char *host, *port, *path = "/";
static int done_ok, done_err;

/* Ordinary blocking code, as a thread per request would write it. */
static int fetch_once(void) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
  int r = getaddrinfo(host, port, &hints, &res);
  if (r != 0) return -1;
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    freeaddrinfo(res);
    if (fd >= 0) close(fd);
    return -1;
  }
  freeaddrinfo(res);
  char req[512];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path,
                   host);
  if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  char buf[4096];
  ssize_t got = 0, k;
  while ((k = read(fd, buf + got, sizeof buf - 1 - (size_t)got)) > 0) {
    got += k;
    if ((size_t)got == sizeof buf - 1) got = 0; /* keep only the head */
  }
  close(fd);
  buf[got] = '\0';
  int status = 0;
  return sscanf(buf, "HTTP/%*s %d", &status) == 1 ? status : -1;
}

static int fetch_fiber(void *arg) {
  (void)arg;
  int status = fetch_once();
  if (status >= 200 && status < 400)
    done_ok++;
  else
    done_err++;
  return 0;
}

static void usage(FILE *to) {
  fputs("usage: hook-fetch HOST PORT [--count N] [--path PATH]\n", to);
}

int main(int argc, char **argv) {
  int count = 100;
  static const struct option opts[] = {{"count", required_argument, 0, 'c'},
                                       {"path", required_argument, 0, 'p'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "c:p:h", opts, NULL)) != -1) {
    if (o == 'c') {
      count = atoi(optarg);
    } else if (o == 'p') {
      path = optarg;
    } else if (o == 'h') {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (argc - optind != 2 || count < 1 || count > 100000) {
    usage(stderr);
    return 2;
  }
  host = argv[optind];
  port = argv[optind + 1];

  iof_io_context *io = iof_io_context_create();
  if (!io) return 1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < count; i++) {
    iof_launch_opts lo = {.stack_size = 128 * 1024};
    if (iof_run_async(iof_io_context_executor(io), &lo, fetch_fiber, NULL))
      return 1;
  }
  iof_io_context_run(io);
  iof_io_context_destroy(io);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
              (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("%d ok, %d failed, %.1f ms, one OS thread\n", done_ok, done_err, ms);
  return done_err ? 1 : 0;
}
