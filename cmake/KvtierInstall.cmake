# Install rules, the CMake package config (find_package(kvtier CONFIG)
# exporting kvtier::kvtier, kvtier::kvtier_static and kvtier::kvtier_c),
# pkg-config files (kvtier.pc, kvtier_c.pc) and CPack (cpack -G DEB).
#
#   include/kvtier/*.h                   public headers
#   <libdir>/libkvtier.so, libkvtier.a   the C++ library, shared and static
#   <libdir>/libkvtier_c.so              the C API
#   <libdir>/cmake/kvtier/               package config
#   <libdir>/pkgconfig/kvtier{,_c}.pc
#   bin/kvtier                           the command
#   KVTIER_PYTHON_INSTALL_DIR/kvtier/    the Python package
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVTIER_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
    "Where the Python package is installed, relative to the prefix (Debian's layout for /usr)")
set(_kvtier_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvtier DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(TARGETS kvtier_shared kvtier_static kvtier_c EXPORT kvtierTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kvtier_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${_kvtier_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvtierConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/kvtierConfig.cmake
                              INSTALL_DESTINATION ${_kvtier_cmake_dir})
# Before 1.0 a minor version may break compatibility.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kvtierConfig.cmake ${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
        DESTINATION ${_kvtier_cmake_dir})

# pkg-config: the prefix is found from the .pc file's own place, so an
# install moved elsewhere (cmake --install --prefix X) still resolves.
file(RELATIVE_PATH KVTIER_PC_PREFIX_FROM_PCDIR "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" KVTIER_PC_PREFIX_FROM_PCDIR "${KVTIER_PC_PREFIX_FROM_PCDIR}")
set(KVTIER_PC_SANITIZE "")
if(KVTIER_SANITIZE)
  set(KVTIER_PC_SANITIZE "-fsanitize=${KVTIER_SANITIZE}")
endif()
list(JOIN KVTIER_EXTERNAL_LINK_ITEMS " " KVTIER_PC_LIBS_PRIVATE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvtier.pc.in ${CMAKE_BINARY_DIR}/kvtier.pc @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvtier_c.pc.in ${CMAKE_BINARY_DIR}/kvtier_c.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kvtier.pc ${CMAKE_BINARY_DIR}/kvtier_c.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(TARGET kvtier_python)
  install(DIRECTORY ${CMAKE_BINARY_DIR}/python/kvtier DESTINATION ${KVTIER_PYTHON_INSTALL_DIR}
          PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE)
endif()

# cpack -G DEB (run in the build folder): one package with everything above
# under /usr; dpkg-shlibdeps fills in the shared-library dependencies.
set(CPACK_PACKAGE_NAME kvtier)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "kvtier maintainers <kvtier@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "KV-cache tiers (RAM, disk) for LLM inference engines: C++ and C libraries, CLI, Python module")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file and the ldconfig trigger for the two shared libraries.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
if(TARGET kvtier_python)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.11), python3 (<< 3.12), python3-numpy")
endif()
include(CPack)

# Not under ThreadSanitizer: packaging has no threads to check, and the dev
# (ASan) build runs the same two tests (CI time).
if(KVTIER_BUILD_TESTS AND NOT KVTIER_SANITIZE STREQUAL "thread")
  # Install into a temporary prefix and build consumers with find_package and
  # pkg-config; then cpack -G DEB and look inside the package.
  add_test(NAME package
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/package/package_test.sh ${CMAKE_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(package PROPERTIES TIMEOUT 600 ENVIRONMENT_MODIFICATION
    "KVTIER_C_COMPILER=set:${CMAKE_C_COMPILER};KVTIER_CXX_COMPILER=set:${CMAKE_CXX_COMPILER};KVTIER_PYTHON=set:${KVTIER_PYTHON};KVTIER_PY_PRELOAD=set:${KVTIER_PY_PRELOAD}")
  add_test(NAME package_deb
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/package/deb_test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(package_deb PROPERTIES TIMEOUT 600)
endif()
