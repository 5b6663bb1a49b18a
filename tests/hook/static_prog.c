/* A statically linked program for hook_cli: iofiber-run must warn that it
 * runs without the hook, and still run it. */
#include <stdio.h>

int main(void) {
  puts("static ok");
  return 0;
}
