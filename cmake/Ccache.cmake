# ccache: a compile seen before, in this clone or another, comes from the cache (kept outside
# the clone, ~/.cache/ccache), so a fresh clone's builds (the sanitized suite's, ThreadSanitizer's,
# the fuzzers', the Debian 13 root's) take seconds once the same source was built on this
# machine. Paths under the project's root are hashed relative to it and the build folder is left
# out, so clones in other folders share the entries (then their debug information, and the
# warnings replayed from the cache, name the folder of the first). Files compiled with a
# precompiled header (arbench train's libtorch) are cached too: the header is made from the
# same source with the same flags, which the sloppiness below lets ccache trust.
# -DARCOLL_CCACHE=OFF compiles without it. Included by the library's project and by the
# fuzzers' and ThreadSanitizer's (tests/fuzz, tests/sanitizers).
option(ARCOLL_CCACHE "Compile through ccache where it is installed" ON)
find_program(ARCOLL_CCACHE_PROGRAM ccache)
if(ARCOLL_CCACHE AND ARCOLL_CCACHE_PROGRAM)
  get_filename_component(arcoll_ccache_base ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
  foreach(language C CXX CUDA)
    if(NOT CMAKE_${language}_COMPILER_LAUNCHER)
      set(CMAKE_${language}_COMPILER_LAUNCHER env CCACHE_BASEDIR=${arcoll_ccache_base}
          CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros ${ARCOLL_CCACHE_PROGRAM})
    endif()
  endforeach()
endif()
