# Finds what redislock needs and defines the targets it links to:
#   hiredis::hiredis        (always)
#   hiredis::hiredis_ssl    (only when REDISLOCK_WITH_TLS is ON)
#   OpenSSL::SSL            (only when REDISLOCK_WITH_TLS is ON: the headers call OpenSSL directly
#                            to verify the server's name, and hiredis_ssl links it privately)
# Used by the build and, installed, by redislock-config.cmake for find_package consumers.
#
# hiredis 1.x ships a CMake config with hiredis::hiredis; Debian's 0.14 ships only a
# pkg-config file (its "HiredisConfig.cmake" defines no target), so pkg-config comes second
# and a plain find_path/find_library third.
include(CMakeFindDependencyMacro)
find_dependency(Threads)

if(NOT TARGET hiredis::hiredis)
  find_package(hiredis CONFIG QUIET)
endif()
if(NOT TARGET hiredis::hiredis)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(REDISLOCK_HIREDIS QUIET IMPORTED_TARGET GLOBAL hiredis)
  endif()
  if(TARGET PkgConfig::REDISLOCK_HIREDIS)
    add_library(hiredis::hiredis INTERFACE IMPORTED GLOBAL)
    target_link_libraries(hiredis::hiredis INTERFACE PkgConfig::REDISLOCK_HIREDIS)
  else()
    find_path(REDISLOCK_HIREDIS_INCLUDE_DIR hiredis/hiredis.h)
    find_library(REDISLOCK_HIREDIS_LIBRARY hiredis)
    if(NOT REDISLOCK_HIREDIS_INCLUDE_DIR OR NOT REDISLOCK_HIREDIS_LIBRARY)
      message(FATAL_ERROR "redislock: hiredis not found (Debian/Ubuntu: apt-get install libhiredis-dev)")
    endif()
    add_library(hiredis::hiredis UNKNOWN IMPORTED GLOBAL)
    set_target_properties(hiredis::hiredis PROPERTIES
      IMPORTED_LOCATION "${REDISLOCK_HIREDIS_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${REDISLOCK_HIREDIS_INCLUDE_DIR}")
  endif()
endif()

if(REDISLOCK_WITH_TLS AND NOT TARGET hiredis::hiredis_ssl)
  find_package(hiredis_ssl CONFIG QUIET)
  if(NOT TARGET hiredis::hiredis_ssl)
    find_package(PkgConfig QUIET)
    if(PKG_CONFIG_FOUND)
      pkg_check_modules(REDISLOCK_HIREDIS_SSL QUIET IMPORTED_TARGET GLOBAL hiredis_ssl)
    endif()
    if(NOT TARGET PkgConfig::REDISLOCK_HIREDIS_SSL)
      message(FATAL_ERROR "redislock: REDISLOCK_WITH_TLS needs hiredis >= 1.0 built with hiredis_ssl")
    endif()
    add_library(hiredis::hiredis_ssl INTERFACE IMPORTED GLOBAL)
    target_link_libraries(hiredis::hiredis_ssl INTERFACE PkgConfig::REDISLOCK_HIREDIS_SSL)
  endif()
endif()
if(REDISLOCK_WITH_TLS)
  find_dependency(OpenSSL)
endif()
