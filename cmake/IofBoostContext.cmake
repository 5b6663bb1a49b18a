# Which names does the installed Boost.Context export for jump_fcontext,
# make_fcontext and ontop_fcontext?
#
# Up to Boost 1.86 the assembly defines them as plain C symbols. From 1.87
# only the C++ functions of boost::context::detail are exported, under their
# mangled names. fiber/fcontext.h declares the C names and, with
# IOF_FCONTEXT_CXX_ABI=1, binds them to the mangled symbols with asm labels
# (the calling convention is the same: the transfer struct comes back in
# two registers either way). Both forms are tried by linking a probe
# against ${IOF_BOOST_CONTEXT_LIB}; the result is cached in
# IOF_FCONTEXT_ABI ("c" or "cxx").
function(iof_detect_fcontext_abi)
  if(DEFINED CACHE{IOF_FCONTEXT_ABI_LIB}
     AND IOF_FCONTEXT_ABI_LIB STREQUAL IOF_BOOST_CONTEXT_LIB
     AND IOF_FCONTEXT_ABI)
    return()
  endif()
  set(_log "")
  foreach(abi c cxx)
    set(_defs "")
    if(abi STREQUAL "cxx")
      set(_defs -DIOF_FCONTEXT_CXX_ABI=1)
    endif()
    try_compile(_ok ${PROJECT_BINARY_DIR}/fcontext_abi_${abi}
      ${PROJECT_SOURCE_DIR}/cmake/checks/fcontext_abi.c
      COMPILE_DEFINITIONS ${_defs}
      CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${PROJECT_SOURCE_DIR}"
      LINK_LIBRARIES ${IOF_BOOST_CONTEXT_LIB}
      OUTPUT_VARIABLE _out)
    if(_ok)
      message(STATUS "Boost.Context fcontext entry points: ${abi} names "
                     "(${IOF_BOOST_CONTEXT_LIB})")
      set(IOF_FCONTEXT_ABI ${abi} CACHE INTERNAL "fcontext symbol names")
      set(IOF_FCONTEXT_ABI_LIB ${IOF_BOOST_CONTEXT_LIB} CACHE INTERNAL "")
      return()
    endif()
    string(APPEND _log "---- ${abi} names:\n${_out}\n")
  endforeach()
  message(FATAL_ERROR
    "${IOF_BOOST_CONTEXT_LIB} exports neither the C fcontext entry points "
    "(jump_fcontext, make_fcontext, ontop_fcontext: Boost <= 1.86) nor the "
    "C++ ones of boost::context::detail (Boost >= 1.87). Point "
    "IOF_BOOST_CONTEXT_LIB at a libboost_context built for this compiler "
    "and architecture.\n${_log}")
endfunction()

iof_detect_fcontext_abi()
if(IOF_FCONTEXT_ABI STREQUAL "cxx")
  add_compile_definitions(IOF_FCONTEXT_CXX_ABI=1)
endif()
