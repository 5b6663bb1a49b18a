# Checks that a program built with -include iofiber/compat.h (and
# -D_FORTIFY_SOURCE=2) imports the iof_compat_* shims and none of the
# POSIX calls they replace, fortified or not. Usage: cmake -DBIN=exe -P ...
find_program(NM nm REQUIRED)
execute_process(COMMAND ${NM} -D --undefined-only ${BIN}
                OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${BIN}")
endif()
foreach(want iof_compat_read iof_compat_write iof_compat_accept
        iof_compat_pthread_create iof_compat_pthread_mutex_lock
        iof_compat_user_main)
  if(want STREQUAL iof_compat_user_main)
    continue() # defined in the program itself
  endif()
  if(NOT syms MATCHES "U ${want}\n")
    message(FATAL_ERROR "${BIN} does not import ${want}:\n${syms}")
  endif()
endforeach()
foreach(bad read write accept __read_chk __recv_chk pthread_create
        pthread_mutex_lock pthread_detach usleep close)
  if(syms MATCHES "U ${bad}(@[^\n]*)?\n")
    message(FATAL_ERROR "${BIN} still imports ${bad}:\n${syms}")
  endif()
endforeach()
message(STATUS "header swap ok: only iof_compat_* shims imported")
