#include "driver_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

int drv_free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  int p = -1;
  if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(s, (struct sockaddr *)&a, &l) == 0)
    p = ntohs(a.sin_port);
  close(s);
  return p;
}

int drv_connect(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
    close(s);
    return -1;
  }
  struct timeval tv = {5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return s;
}

bool drv_wait_listening(int port, pid_t pid) {
  for (int i = 0; i < 250; i++) {
    int s = drv_connect(port);
    if (s >= 0) {
      close(s);
      return true;
    }
    if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid) return false;
    usleep(20000);
  }
  return false;
}

pid_t drv_spawn(const char *const *argv, int in_fd, const char *out,
                const char *err) {
  pid_t pid = fork();
  if (pid == 0) {
    int i = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
    int o = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(i, 0), dup2(o, 1), dup2(e, 2);
    unsetenv("LD_PRELOAD");
    unsetenv("IOF_RUN");
    execv(argv[0], (char *const *)argv);
    _exit(99);
  }
  return pid;
}

int drv_wait_exit(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 50; i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(20000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

size_t drv_slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return buf[0] = '\0', 0;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  return n;
}

int drv_os_threads(pid_t pid) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  drv_slurp(path, buf, sizeof buf);
  const char *t = strstr(buf, "Threads:");
  return t ? atoi(t + 8) : -1;
}

bool drv_installed(const char *const *paths) {
  for (; *paths; paths++)
    if (access(*paths, X_OK)) return false;
  return true;
}

bool drv_write_file(const char *path, const void *data, size_t n, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd < 0) return false;
  bool ok = write(fd, data, n) == (ssize_t)n;
  close(fd);
  return ok;
}

bool drv_make_site(const char *root, const char *post, size_t file_bytes,
                   size_t post_bytes) {
  char path[512];
  size_t n = file_bytes > post_bytes ? file_bytes : post_bytes;
  unsigned char *data = malloc(n ? n : 1);
  if (!data) return false;
  for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i * 13 + i / 253);
  /* Echoes the query and counts the body it reads from stdin. */
  static const char script[] =
      "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\n"
      "echo \"q=$QUERY_STRING\"\nhead -c \"$CONTENT_LENGTH\" | wc -c\n";
  bool ok = mkdir(root, 0755) == 0;
  snprintf(path, sizeof path, "%s/cgi", root);
  ok = ok && mkdir(path, 0755) == 0;
  snprintf(path, sizeof path, "%s/file.bin", root);
  ok = ok && drv_write_file(path, data, file_bytes, 0644);
  snprintf(path, sizeof path, "%s/cgi/count.cgi", root);
  ok = ok && drv_write_file(path, script, sizeof script - 1, 0755);
  ok = ok && drv_write_file(post, data, post_bytes, 0644);
  free(data);
  return ok;
}

int drv_run(const char *const *argv, const char *out, int seconds) {
  pid_t pid = drv_spawn(argv, -1, out, NULL);
  return pid < 0 ? -1 : drv_wait_exit(pid, seconds);
}

int drv_stop(pid_t pid) {
  kill(pid, SIGTERM);
  return drv_wait_exit(pid, 10);
}

long drv_figure(const char *report, const char *label) {
  const char *p = strstr(report, label);
  return p ? strtol(p + strlen(label), NULL, 10) : -1;
}

static int remove_entry(const char *path, const struct stat *sb, int type,
                        struct FTW *ftw) {
  (void)sb, (void)type, (void)ftw;
  remove(path);
  return 0;
}

void drv_remove_tree(const char *dir) {
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
