/* A tiny threaded HTTP/1.1 server for the hook tests: every request gets
 * "hello" after delay_ms, one thread per connection, Connection: close. */
#ifndef IOF_TEST_HTTP_DELAY_SERVER_H
#define IOF_TEST_HTTP_DELAY_SERVER_H

/* Listens on 127.0.0.1 (free port), serves in background threads. Returns
 * the port, or -errno. */
int http_delay_server_start(int delay_ms);

#endif
