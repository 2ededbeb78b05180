# Reduction kernels: src/base/reduce_kernels.inc compiled once per instruction set, each copy in its
# own namespace; src/base/reduce.cpp picks one at run time (see src/base/reduce.hpp). Included after the
# `arcoll_objects` target is defined; the top-level glob leaves the src/base/reduce_isa_*.cpp files to us.

set(ARCOLL_KERNEL_OPTIMIZE -O3)

target_sources(arcoll_objects PRIVATE ${CMAKE_SOURCE_DIR}/src/base/reduce_isa_generic.cpp)
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/base/reduce_isa_generic.cpp
  PROPERTIES COMPILE_OPTIONS "${ARCOLL_KERNEL_OPTIMIZE}")

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|x64)$")
  target_sources(arcoll_objects PRIVATE
    ${CMAKE_SOURCE_DIR}/src/base/reduce_isa_avx2.cpp
    ${CMAKE_SOURCE_DIR}/src/base/reduce_isa_avx512.cpp)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/base/reduce_isa_avx2.cpp
    PROPERTIES COMPILE_OPTIONS "${ARCOLL_KERNEL_OPTIMIZE};-mavx2;-mfma;-mf16c")
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/base/reduce_isa_avx512.cpp
    PROPERTIES COMPILE_OPTIONS
    "${ARCOLL_KERNEL_OPTIMIZE};-mavx512f;-mavx512bw;-mavx512vl;-mavx2;-mfma;-mf16c")
  # Tells the dispatcher that the avx2 and avx512 tables exist.
  set_property(SOURCE ${CMAKE_SOURCE_DIR}/src/base/reduce.cpp APPEND
    PROPERTY COMPILE_DEFINITIONS ARCOLL_KERNELS_X86=1)
  set(ARCOLL_KERNEL_ISAS "generic avx2 avx512")
else()
  set(ARCOLL_KERNEL_ISAS "generic")
endif()

if(COMMAND arcoll_report)
  arcoll_report("kernels" "built" "${ARCOLL_KERNEL_ISAS} (chosen at run time)")
endif()
