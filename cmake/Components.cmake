# Finds the required and optional dependencies and prints one line per component.
find_package(Threads REQUIRED)
find_package(PkgConfig QUIET)

function(arcoll_report name state detail)
  string(LENGTH "${name}" len)
  math(EXPR pad "12 - ${len}")
  string(REPEAT " " ${pad} spaces)
  message(STATUS "arcoll component ${name}${spaces}${state}: ${detail}")
endfunction()

# ccache: a compile seen before, in this clone or another, comes from the cache (kept outside
# the clone, ~/.cache/ccache), so a fresh clone's builds (the sanitized suite's, ThreadSanitizer's,
# the fuzzers', the Debian 13 root's) take seconds once the same source was built on this
# machine. Paths under the source folder are hashed relative to it and the build folder is left
# out, so clones in other folders share the entries (then their debug information, and the
# warnings replayed from the cache, name the folder of the first). Files compiled with a
# precompiled header (arbench train's libtorch) are cached too: the header is made from the
# same source with the same flags, which the sloppiness below lets ccache trust.
# -DARCOLL_CCACHE=OFF compiles without it.
option(ARCOLL_CCACHE "Compile through ccache where it is installed" ON)
find_program(ARCOLL_CCACHE_PROGRAM ccache)
if(NOT ARCOLL_CCACHE)
  arcoll_report("ccache" "off" "-DARCOLL_CCACHE=OFF: every compile runs")
elseif(ARCOLL_CCACHE_PROGRAM)
  foreach(language C CXX CUDA)
    if(NOT CMAKE_${language}_COMPILER_LAUNCHER)
      set(CMAKE_${language}_COMPILER_LAUNCHER env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}
          CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros ${ARCOLL_CCACHE_PROGRAM})
    endif()
  endforeach()
  arcoll_report("ccache" "used" "${ARCOLL_CCACHE_PROGRAM} (compiles seen before on this machine come from its cache)")
else()
  arcoll_report("ccache" "absent" "ccache not installed: every compile runs")
endif()

# Required: nlohmann-json for tuning files (library) and results (arbench); CLI11 for arbench.
find_package(nlohmann_json CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "arcoll needs nlohmann-json: run scripts/install-deps.sh")
endif()
# Required: OpenSSL's libcrypto for the job token's HMAC challenge-response (src/base/auth.hpp).
find_package(OpenSSL QUIET COMPONENTS Crypto)
if(NOT OpenSSL_FOUND)
  message(FATAL_ERROR "arcoll needs OpenSSL (libssl-dev) to authenticate connections: run scripts/install-deps.sh")
endif()
find_package(CLI11 CONFIG QUIET)
if(ARCOLL_BUILD_BENCH AND NOT CLI11_FOUND)
  message(FATAL_ERROR "arbench needs CLI11: run scripts/install-deps.sh "
                      "(or configure with -DARCOLL_BUILD_BENCH=OFF)")
endif()

# MPI: bootstrap under mpirun without a master address, and the MPI comparison backend.
find_package(MPI QUIET COMPONENTS C)
if(MPI_C_FOUND)
  set(ARCOLL_WITH_MPI ON)
  arcoll_report("MPI" "used" "MPI ${MPI_C_VERSION} (rendezvous under mpirun without ARCOLL_MASTER_ADDR; arbench --backend mpi)")
else()
  set(ARCOLL_WITH_MPI OFF)
  arcoll_report("MPI" "absent" "no MPI C library found; under mpirun set ARCOLL_MASTER_ADDR; no arbench --backend mpi")
endif()

# Transports whose library is missing are left out of the build (ARCOLL_TRANSPORTS_ABSENT):
# their folder compiles nothing, registers nothing, and its tests are not registered.
set(ARCOLL_TRANSPORTS_ABSENT "")
find_package(ucx CONFIG QUIET)
if(ucx_FOUND)
  set(ARCOLL_WITH_UCX ON)
  get_target_property(ARCOLL_UCP_LIBRARY ucx::ucp IMPORTED_LOCATION)
  get_target_property(ARCOLL_UCS_LIBRARY ucx::ucs IMPORTED_LOCATION)
  arcoll_report("UCX" "used" "${ucx_VERSION} (the ucx transport)")
else()
  set(ARCOLL_WITH_UCX OFF)
  list(APPEND ARCOLL_TRANSPORTS_ABSENT ucx)
  arcoll_report("UCX" "absent" "libucx-dev not installed: no ucx transport")
endif()

if(PkgConfig_FOUND)
  pkg_check_modules(IBVERBS QUIET IMPORTED_TARGET libibverbs)
  pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc)
endif()
if(IBVERBS_FOUND)
  set(ARCOLL_WITH_IBVERBS ON)
  arcoll_report("ibverbs" "used" "rdma-core ${IBVERBS_VERSION} (the verbs transport; RDMA ports in arbench topo)")
else()
  set(ARCOLL_WITH_IBVERBS OFF)
  list(APPEND ARCOLL_TRANSPORTS_ABSENT verbs)
  arcoll_report("ibverbs" "absent" "libibverbs-dev not installed: no verbs transport; RDMA ports read from sysfs")
endif()
if(HWLOC_FOUND)
  set(ARCOLL_WITH_HWLOC ON)
  arcoll_report("hwloc" "used" "${HWLOC_VERSION} (PCI tree and device locality in arbench topo)")
else()
  set(ARCOLL_WITH_HWLOC OFF)
  arcoll_report("hwloc" "absent" "libhwloc-dev not installed; no PCI tree in arbench topo")
endif()

find_path(GLOO_INCLUDE_DIR gloo/allreduce_ring.h)
find_library(GLOO_LIBRARY gloo)
if(GLOO_INCLUDE_DIR AND GLOO_LIBRARY)
  set(ARCOLL_WITH_GLOO ON)
  arcoll_report("Gloo" "used" "${GLOO_LIBRARY} (arbench --backend gloo)")
else()
  set(ARCOLL_WITH_GLOO OFF)
  arcoll_report("Gloo" "absent" "libgloo-dev not installed; no arbench --backend gloo")
endif()

find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  set(ARCOLL_WITH_CUDA ON)
  # The kernels (src/base/cuda/) are built for these architectures, named rather than guessed from
  # a GPU the building machine may not have: Ampere and Hopper by default.
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  set(CMAKE_CUDA_STANDARD 17)  # what CMake 3.25 knows of nvcc; the kernels need no more
  enable_language(CUDA)
  arcoll_report("CUDA" "used" "${CUDAToolkit_VERSION}, kernels for sm ${CMAKE_CUDA_ARCHITECTURES} (device buffers through CUDA IPC between the ranks of a host, else staged through pinned host memory; GPUs, P2P and NVLink in arbench topo; NVML loaded at run time)")
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND TARGET CUDA::cudart_static)
    set(ARCOLL_WITH_NCCL ON)
    arcoll_report("NCCL" "used" "${NCCL_LIBRARY} (arbench --backend nccl; needs a GPU at run time)")
  else()
    set(ARCOLL_WITH_NCCL OFF)
    arcoll_report("NCCL" "absent" "nccl.h or libnccl not found next to CUDA; no arbench --backend nccl")
  endif()
else()
  set(ARCOLL_WITH_CUDA OFF)
  arcoll_report("CUDA" "absent" "no CUDA toolkit found (set CUDAToolkit_ROOT); GPUs from the PCI bus only")
  set(ARCOLL_WITH_NCCL OFF)
  arcoll_report("NCCL" "absent" "needs the CUDA toolkit; no arbench --backend nccl")
endif()

# PyTorch: the arcoll_torch module (a torch.distributed backend) for the Python that has torch.
set(ARCOLL_WITH_TORCH OFF)
find_package(Torch QUIET CONFIG)
find_package(ZLIB QUIET)
# arbench train: libtorch's C++ API and zlib (Fashion-MNIST's gzipped files).
if(Torch_FOUND AND ZLIB_FOUND)
  set(ARCOLL_WITH_TRAIN ON)
  arcoll_report("train" "used" "libtorch ${Torch_VERSION} and zlib ${ZLIB_VERSION_STRING} (arbench train)")
else()
  set(ARCOLL_WITH_TRAIN OFF)
  arcoll_report("train" "absent" "needs libtorch-dev and zlib1g-dev; no arbench train")
endif()
if(NOT Torch_FOUND)
  arcoll_report("libtorch" "absent" "libtorch-dev not installed; no torch.distributed backend")
else()
  # The interpreter that imports torch: ARCOLL_PYTHON, else the system's, else the first on PATH.
  set(ARCOLL_PYTHON "" CACHE FILEPATH "Python with torch, for the arcoll_torch module")
  set(torch_python "")
  foreach(candidate ${ARCOLL_PYTHON} /usr/bin/python3 python3)
    execute_process(COMMAND ${candidate} -c "import torch"
                    RESULT_VARIABLE imports OUTPUT_QUIET ERROR_QUIET)
    if(imports EQUAL 0)
      set(torch_python ${candidate})
      break()
    endif()
  endforeach()
  find_library(TORCH_PYTHON_LIBRARY torch_python HINTS ${TORCH_INSTALL_PREFIX}/lib)
  if(torch_python)
    # What pybind11 builds the module for, found with CMake's FindPython first: pybind11 then
    # uses its tools made for it, as it does anyway where torch's CMake package found Python
    # (pip's torch 2.x), and those need FindPython's development part.
    set(PYTHON_EXECUTABLE ${torch_python})
    set(Python_EXECUTABLE ${torch_python})
    find_package(Python QUIET COMPONENTS Interpreter Development.Module)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(NOT torch_python)
    arcoll_report("libtorch" "found" "no python imports torch (install python3-torch); no arcoll_torch")
  elseif(NOT pybind11_FOUND OR NOT TORCH_PYTHON_LIBRARY)
    arcoll_report("libtorch" "found" "pybind11-dev or libtorch_python missing; no arcoll_torch")
  else()
    set(ARCOLL_WITH_TORCH ON)
    set(ARCOLL_TORCH_PYTHON ${torch_python})
    file(RELATIVE_PATH module_dir ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/python)
    arcoll_report("libtorch" "used" "torch ${Torch_VERSION}: arcoll_torch module for ${torch_python} (${module_dir})")
  endif()
endif()
