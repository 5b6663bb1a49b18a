# iof_install_pkgconfig(NAME <name> DESCRIPTION <text> LIBS <flag>...
#                       [LIBS_PRIVATE <flag>...] [REQUIRES <pkg>...]
#                       [REQUIRES_PRIVATE <pkg>...])
#
# Writes <name>.pc into the build tree and installs it into
# <libdir>/pkgconfig. The prefix is computed from the .pc file's own
# directory (${pcfiledir}), so the file stays right after
# `cmake --install build --prefix X`, inside a .deb, or in a moved tree.
# Flags may use ${libdir} and ${includedir} (escape the $ in CMake: \${libdir}).
function(iof_install_pkgconfig)
  cmake_parse_arguments(PC "" "NAME;DESCRIPTION"
                        "LIBS;LIBS_PRIVATE;REQUIRES;REQUIRES_PRIVATE" ${ARGN})
  if(NOT PC_NAME)
    message(FATAL_ERROR "iof_install_pkgconfig: NAME is required")
  endif()
  set(IOF_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  if(NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    file(RELATIVE_PATH _up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
    string(REGEX REPLACE "/$" "" _up "${_up}")
    set(IOF_PC_PREFIX "\${pcfiledir}/${_up}")
  endif()
  foreach(v LIBS LIBS_PRIVATE REQUIRES REQUIRES_PRIVATE)
    string(JOIN " " PC_${v} ${PC_${v}})
  endforeach()
  set(_out ${PROJECT_BINARY_DIR}/pkgconfig/${PC_NAME}.pc)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/pkgconfig.pc.in ${_out} @ONLY)
  install(FILES ${_out} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
