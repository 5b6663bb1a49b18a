/* iofiber: umbrella header. Includes every public header of the library.
 *
 * Each module (fiber/, sched/, io/, compat/) installs its own headers as
 * <iofiber/NAME.h>; when a module adds a public header, it appends an
 * #include for it here, in dependency order (fiber <- sched <- io). */
#ifndef IOFIBER_IOFIBER_H
#define IOFIBER_IOFIBER_H

/* fiber/ */
#include <iofiber/frame_allocator.h>
#include <iofiber/fiber.h>
#include <iofiber/fls.h>
#include <iofiber/executor.h>
#include <iofiber/stop.h>
#include <iofiber/env.h>
#include <iofiber/launch.h>
#include <iofiber/strand.h>
#include <iofiber/thread_pool.h>
#include <iofiber/sync.h>
#include <iofiber/chan.h>
#include <iofiber/when.h>
#include <iofiber/error.h>
#include <iofiber/debug.h>
#include <iofiber/io_context.h>
#include <iofiber/timer.h>
#include <iofiber/resolver.h>
#include <iofiber/socket.h>
#include <iofiber/stream.h>
#include <iofiber/reader.h>
#include <iofiber/signal.h>
#include <iofiber/deadline.h>
#include <iofiber/compat_thread.h>
#include <iofiber/compat_io.h>

#endif
