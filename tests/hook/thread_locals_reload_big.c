/* The module thread_locals_reload loads once the small one is unloaded,
 * usually at the small one's TLS module id: 64 KiB of thread-locals with
 * an initial value. */
static __thread char big[65536] = {'B'};

int big_first(void) {
  return big[0];
}

int big_last(void) {
  return big[sizeof big - 1];
}

void big_fill(char c) {
  for (unsigned i = 0; i < sizeof big; i++) big[i] = c;
}
