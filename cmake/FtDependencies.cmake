# The system dependencies, all from Debian packages:
#   libhwloc-dev, libevent-dev, libcjson-dev, libdnnl-dev,
#   libzmq3-dev and libmsgpack-dev (ft serve --kv-events: ZeroMQ is the
#   transport every KV-event consumer speaks, msgpack the encoding of
#   vLLM's event format; engine/serve/kv_events.c)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(LIBEVENT REQUIRED IMPORTED_TARGET libevent libevent_pthreads)
pkg_check_modules(CJSON REQUIRED IMPORTED_TARGET libcjson)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
pkg_check_modules(MSGPACK REQUIRED IMPORTED_TARGET msgpack)
if(FT_ONEDNN)
  # Not find_package(dnnl CONFIG): Debian's dnnl-config.cmake requires
  # OpenCL's development files even for the CPU engine, and fails the
  # configure (QUIET or not) on a machine without them.
  find_library(DNNL_LIBRARY NAMES dnnl)
  find_path(DNNL_INCLUDE_DIR NAMES dnnl.h)
  if(NOT DNNL_LIBRARY OR NOT DNNL_INCLUDE_DIR)
    message(FATAL_ERROR "oneDNN not found: apt-get install libdnnl-dev, or configure with -DFT_ONEDNN=OFF")
  endif()
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION ${DNNL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${DNNL_INCLUDE_DIR})
endif()
