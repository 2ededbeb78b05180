# The installed library: shared (arcoll::arcoll) and static (arcoll::arcoll_static), the public
# headers, a CMake package (find_package(arcoll CONFIG)) and a pkg-config file (arcoll.pc);
# arbench goes to bin/. What the headers include is public only (include/arcoll/).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The static library holds the library as one relocatable object (ld -r): algorithms and
# transports register themselves from static initialisers nothing refers to, which a linker
# would leave out of an archive of separate objects.
set(ARCOLL_COMBINED_OBJECT ${CMAKE_BINARY_DIR}/arcoll_combined.o)
add_custom_command(OUTPUT ${ARCOLL_COMBINED_OBJECT}
                   COMMAND ${CMAKE_LINKER} -r -o ${ARCOLL_COMBINED_OBJECT}
                           $<TARGET_OBJECTS:arcoll_objects>
                   DEPENDS $<TARGET_OBJECTS:arcoll_objects>
                   COMMAND_EXPAND_LISTS VERBATIM
                   COMMENT "Combining arcoll's objects for the static library")
set_source_files_properties(${ARCOLL_COMBINED_OBJECT} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
add_library(arcoll_static STATIC ${ARCOLL_COMBINED_OBJECT})
add_dependencies(arcoll_static arcoll_objects)
set_target_properties(arcoll_static PROPERTIES OUTPUT_NAME arcoll LINKER_LANGUAGE CXX)
target_include_directories(arcoll_static INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                                                   $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# What a program linked with the static library needs besides it: the libraries found at
# configure time, by path, so that the installed package needs no search of its own.
set(ARCOLL_STATIC_DEPENDENCIES ${OPENSSL_CRYPTO_LIBRARY})
if(ARCOLL_WITH_MPI)
  list(APPEND ARCOLL_STATIC_DEPENDENCIES ${MPI_C_LIBRARIES})
endif()
if(ARCOLL_WITH_HWLOC)
  list(APPEND ARCOLL_STATIC_DEPENDENCIES ${HWLOC_LINK_LIBRARIES})
endif()
if(ARCOLL_WITH_IBVERBS)
  list(APPEND ARCOLL_STATIC_DEPENDENCIES ${IBVERBS_LINK_LIBRARIES})
endif()
if(ARCOLL_WITH_UCX)
  list(APPEND ARCOLL_STATIC_DEPENDENCIES ${ARCOLL_UCP_LIBRARY} ${ARCOLL_UCS_LIBRARY})
endif()
if(ARCOLL_WITH_CUDA)
  list(APPEND ARCOLL_STATIC_DEPENDENCIES ${CUDA_cudart_static_LIBRARY} rt ${CMAKE_DL_LIBS})
endif()
list(APPEND ARCOLL_STATIC_DEPENDENCIES -pthread)
target_link_libraries(arcoll_static INTERFACE ${ARCOLL_STATIC_DEPENDENCIES})
# A sanitized arcoll needs its sanitizers' run-time in the program (loaded first).
if(ARCOLL_SANITIZE)
  set(ARCOLL_SANITIZER_LINK_FLAGS -fsanitize=${ARCOLL_SANITIZE})
  target_link_options(arcoll INTERFACE ${ARCOLL_SANITIZER_LINK_FLAGS})
  target_link_options(arcoll_static INTERFACE ${ARCOLL_SANITIZER_LINK_FLAGS})
endif()

install(TARGETS arcoll arcoll_static EXPORT arcollTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/arcoll DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT arcollTargets NAMESPACE arcoll:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arcoll)
configure_package_config_file(cmake/arcollConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/arcollConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arcoll)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/arcollConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/arcollConfig.cmake ${CMAKE_BINARY_DIR}/arcollConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/arcoll)

# pkg-config: `pkg-config --cflags --libs arcoll`; with --static, the libraries it needs. The
# file finds the prefix from where it lies, so that it stays right wherever it is installed.
set(ARCOLL_PC_LIBS_PRIVATE "")
foreach(library ${ARCOLL_STATIC_DEPENDENCIES})
  if(NOT IS_ABSOLUTE ${library} AND NOT library MATCHES "^-")
    set(library -l${library})  # a bare name, as CMake takes them
  endif()
  string(APPEND ARCOLL_PC_LIBS_PRIVATE " ${library}")
endforeach()
string(STRIP "${ARCOLL_PC_LIBS_PRIVATE}" ARCOLL_PC_LIBS_PRIVATE)
file(RELATIVE_PATH ARCOLL_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" ARCOLL_PC_TO_PREFIX "${ARCOLL_PC_TO_PREFIX}")
configure_file(cmake/arcoll.pc.in ${CMAKE_BINARY_DIR}/arcoll.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/arcoll.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Inside the build, the examples and tests use the same names as a project that installed it.
add_library(arcoll::arcoll ALIAS arcoll)
add_library(arcoll::arcoll_static ALIAS arcoll_static)
