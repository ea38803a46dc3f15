# The C API: libkvtier_c.so (target kvtier_c, exported as kvtier::kvtier_c),
# built into the build folder's root from src/capi/ and the component
# libraries (KVTIER_LIBRARY_COMPONENTS, cmake/KvtierLibraries.cmake), so that
# a C program needs only this one library. The version script exports the
# kvtier_* functions of include/kvtier/kvtier_c.h and hides everything else.

# kvtier_bindings_common (src/bindings/: the options table and CacheSpec the
# C API, the Python module and the CLI share) is defined in ../CMakeLists.txt.

set(_kvtier_c_map ${PROJECT_SOURCE_DIR}/src/capi/kvtier_c.map)
add_library(kvtier_c SHARED ${PROJECT_SOURCE_DIR}/src/capi/kvtier_c.cc
                            ${PROJECT_SOURCE_DIR}/src/capi/block_codec_c.cc
                            ${PROJECT_SOURCE_DIR}/src/capi/keys_c.cc)
kvtier_include_root(capi)
target_include_directories(kvtier_c PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                                    PRIVATE ${KVTIER_INCLUDE_ROOTS}/capi ${KVTIER_INCLUDE_ROOTS}/core)
target_link_libraries(kvtier_c PRIVATE kvtier_bindings_common)
target_compile_definitions(kvtier_c PRIVATE KVTIER_VERSION="${PROJECT_VERSION}")
target_link_options(kvtier_c PRIVATE -Wl,--version-script=${_kvtier_c_map} -Wl,--no-undefined
                             INTERFACE ${_kvtier_sanitize_link})
set_target_properties(kvtier_c PROPERTIES
  C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
  LINK_DEPENDS ${_kvtier_c_map}
  VERSION ${PROJECT_VERSION} SOVERSION 0)
add_library(kvtier::kvtier_c ALIAS kvtier_c)

if(KVTIER_BUILD_TESTS)
  # C11, -Wall -Wextra -Werror, against the public header and libkvtier_c.so
  # only (under ASan+UBSan in the dev preset).
  add_executable(c_api_test ${PROJECT_SOURCE_DIR}/src/capi/c_api_test.c)
  target_link_libraries(c_api_test PRIVATE kvtier_c)
  target_compile_options(c_api_test PRIVATE -Wall -Wextra -Werror)
  set_target_properties(c_api_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                              C_EXTENSIONS OFF)
  add_test(NAME c_api COMMAND c_api_test)
  set_tests_properties(c_api PROPERTIES
    ENVIRONMENT_MODIFICATION "KVTIER_CLI=set:$<TARGET_FILE:kvtier_cli>")
  # The block codec, namespaced keys and shards, the same way (Redis when
  # KVTIER_TEST_REDIS_URL is set, as scripts/test does).
  add_executable(c_codec_test ${PROJECT_SOURCE_DIR}/src/capi/c_codec_test.c)
  target_link_libraries(c_codec_test PRIVATE kvtier_c)
  target_compile_options(c_codec_test PRIVATE -Wall -Wextra -Werror)
  set_target_properties(c_codec_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                                C_EXTENSIONS OFF)
  add_test(NAME c_codec COMMAND c_codec_test)
  set_tests_properties(c_codec PROPERTIES
    ENVIRONMENT_MODIFICATION "KVTIER_CLI=set:$<TARGET_FILE:kvtier_cli>")
  # load_many, contains, erase, clear, prometheus: the same rules.
  add_executable(c_api_ops_test ${PROJECT_SOURCE_DIR}/src/capi/c_api_ops_test.c)
  target_link_libraries(c_api_ops_test PRIVATE kvtier_c)
  target_compile_options(c_api_ops_test PRIVATE -Wall -Wextra -Werror)
  set_target_properties(c_api_ops_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                                  C_EXTENSIONS OFF)
  add_test(NAME c_api_ops COMMAND c_api_ops_test)
  set_tests_properties(c_api_ops PROPERTIES
    ENVIRONMENT_MODIFICATION "KVTIER_CLI=set:$<TARGET_FILE:kvtier_cli>")
endif()

if(KVTIER_BUILD_BENCH)
  # kvtier_cache_load_many against a pread loop and memcpy
  # (src/capi/load_many_bench.c): C11,
  # the public header and libkvtier_c.so only, like c_api_test.
  add_executable(load_many_c_bench ${PROJECT_SOURCE_DIR}/src/capi/load_many_bench.c)
  target_link_libraries(load_many_c_bench PRIVATE kvtier_c Threads::Threads)
  target_compile_options(load_many_c_bench PRIVATE -Wall -Wextra -Werror)
  set_target_properties(load_many_c_bench PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                                     C_EXTENSIONS OFF)
endif()
