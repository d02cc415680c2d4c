# The include rules of docs/architecture.md (Layers) that the compiler does
# not enforce, checked as the ctest test check_layers:
#   cmake -DROOT=<source dir> -P cmake/FtCheckLayers.cmake
# A layer's public headers are enforced by the build (each library sees the
# public include directories of itself and the layers it links, no more). A
# private header beside the sources is spelled from the repository root
# ("engine/runtime/placement.h") or relative to its own directory
# ("model_internal.h"); since the root is a private include directory of
# simd and engine, this check makes sure no source of a layer names another
# layer's private header, and that nobody climbs out with "../".
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<source dir> -P FtCheckLayers.cmake")
endif()

set(bad "")
foreach(layer simd engine http cli)
  file(GLOB_RECURSE files ${ROOT}/${layer}/*.c ${ROOT}/${layer}/*.h)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" inc "${line}")
      string(REGEX MATCH "^(simd|engine|http|cli)/" top "${inc}")
      if(inc MATCHES "^\\.\\./" OR (top AND NOT top STREQUAL "${layer}/"))
        file(RELATIVE_PATH rel ${ROOT} ${f})
        string(APPEND bad "  ${rel}: #include \"${inc}\"\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(bad)
  message(FATAL_ERROR "private headers of another layer (docs/architecture.md, Layers):\n${bad}")
endif()
message(STATUS "check_layers: every include stays within its layer")
