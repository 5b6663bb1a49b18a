/* Sanitizer and Valgrind annotations for stack switches. Boost's fcontext
 * makes none, so every switch in fiber.c makes them itself. */
#ifndef IOF_SANITIZER_H
#define IOF_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define IOF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IOF_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define IOF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IOF_TSAN 1
#endif
#endif

#ifdef IOF_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef IOF_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#ifdef IOF_HAVE_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#endif

#endif
