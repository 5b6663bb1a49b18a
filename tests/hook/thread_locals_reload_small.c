/* The first module thread_locals_reload loads: one small thread-local. */
static __thread int small_v = 5;

int small_get(void) {
  return small_v;
}

void small_set(int v) {
  small_v = v;
}
