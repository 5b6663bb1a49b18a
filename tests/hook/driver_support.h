/* Helpers of the test drivers that start real programs (under iofiber-run
 * or not) and talk to them from plain code: hook_realprogs, hook_proxies,
 * hook_servers, hook_daemons.
 * The drivers are not linked with the hook. */
#ifndef IOF_TEST_DRIVER_SUPPORT_H
#define IOF_TEST_DRIVER_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A free TCP port on 127.0.0.1, or -1. */
int drv_free_port(void);

/* A connection to 127.0.0.1:port with a 5 s receive timeout, or -1. */
int drv_connect(int port);

/* Waits (up to ~5 s) until something listens on port; false if pid died
 * first. */
bool drv_wait_listening(int port, pid_t pid);

/* Starts argv[0] with argv, stdin from in_fd (< 0: /dev/null), stdout and
 * stderr to the files named (NULL: /dev/null), without the hook's
 * variables. The child's pid, or -1. */
pid_t drv_spawn(const char *const *argv, int in_fd, const char *out,
                const char *err);

/* pid's exit status (128 + the signal when killed), or -1 after `seconds`
 * (pid is then killed and reaped). */
int drv_wait_exit(pid_t pid, int seconds);

/* Up to cap - 1 bytes of path into buf, terminated; the count (0 when it
 * cannot be read). */
size_t drv_slurp(const char *path, char *buf, size_t cap);

/* The number of OS threads of pid, or -1. */
int drv_os_threads(pid_t pid);

/* Whether every path in the NULL-terminated list is an executable. */
bool drv_installed(const char *const *paths);

/* Creates (or truncates) path with mode and writes n bytes to it; false
 * if that fails. */
bool drv_write_file(const char *path, const void *data, size_t n, mode_t mode);

/* A web server's document root: the directory root with file.bin
 * (file_bytes of a fixed pattern) and cgi/count.cgi (echoes the query,
 * counts the posted body), and post (post_bytes of the same pattern) to
 * post to it. False if a step fails. */
bool drv_make_site(const char *root, const char *post, size_t file_bytes,
                   size_t post_bytes);

/* Runs argv to its end (at most `seconds`), its stdout to `out`; its exit
 * status, or -1. */
int drv_run(const char *const *argv, const char *out, int seconds);

/* Stops pid with SIGTERM; its exit status (-1: still running after 10 s,
 * then killed). */
int drv_stop(pid_t pid);

/* The number after `label` in a program's report, or -1. */
long drv_figure(const char *report, const char *label);

/* Removes dir and everything under it (symbolic links are not followed). */
void drv_remove_tree(const char *dir);

#endif
