/* The C side of the C++ layout check: sizes and offsets of the public
 * structs with atomic members, as the C compiler lays them out. */
#include <stddef.h>

#include <iofiber/iofiber.h>

size_t iof_test_c_layout(int i);

size_t iof_test_c_layout(int i) {
  switch (i) {
  case 0:
    return sizeof(iof_mutex);
  case 1:
    return offsetof(iof_mutex, owner);
  case 2:
    return offsetof(iof_mutex, lock);
  case 3:
    return sizeof(iof_execution_context);
  case 4:
    return offsetof(iof_execution_context, frame_allocator);
  case 5:
    return offsetof(iof_execution_context, kind);
  case 6:
    return sizeof(iof_reader);
  default:
    return 0;
  }
}
