/* The client side of http_delay_server for the libcurl tests. */
#include "http_delay_server.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

typedef struct body {
  char data[64];
  size_t len;
} body;

static size_t on_data(char *p, size_t size, size_t nmemb, void *user) {
  body *b = user;
  size_t n = size * nmemb;
  size_t room = sizeof b->data - b->len;
  memcpy(b->data + b->len, p, n < room ? n : room);
  b->len += n < room ? n : room;
  return n;
}

bool http_delay_fetch(int port, int i, const char *who) {
  CURL *h = curl_easy_init();
  if (!h) return false;
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/item/%d", port, i);
  body b = {.len = 0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  bool ok = rc == CURLE_OK && code == 200 && b.len == 5 &&
            !memcmp(b.data, "hello", 5);
  if (!ok)
    fprintf(stderr, "%s: request %d: %s, HTTP %ld, %zu bytes\n", who, i,
            curl_easy_strerror(rc), code, b.len);
  curl_easy_cleanup(h);
  return ok;
}
