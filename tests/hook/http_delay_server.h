/* A tiny threaded HTTP/1.1 server for the hook tests: every request gets
 * "hello" after delay_ms, one thread per connection, Connection: close. */
#ifndef IOF_TEST_HTTP_DELAY_SERVER_H
#define IOF_TEST_HTTP_DELAY_SERVER_H

#include <stdbool.h>

/* Listens on 127.0.0.1 (free port), serves in background threads. Returns
 * the port, or -errno. */
int http_delay_server_start(int delay_ms);

/* The same server in a child process, so that its threads are not the
 * caller's: runs /proc/self/exe with `--server` (the caller's main hands
 * that to http_delay_server_child). Returns the port and, in *keep, the
 * pipe whose closing ends the child; or -errno. */
int http_delay_server_spawn(int *keep);

/* The child's main for `--server`: serves with delay_ms, prints the port
 * on stdout, exits when stdin (the parent's pipe) closes. */
int http_delay_server_child(int delay_ms);

/* One GET of /item/i from the server on port through libcurl's easy
 * interface (link http_fetch.c and libcurl): true if it answered "hello";
 * else false, with a line naming `who` on stderr. */
bool http_delay_fetch(int port, int i, const char *who);

#endif
