# Installation: `cmake --install build/release [--prefix P]` (`make install`)
# puts the public headers, the layer libraries, the `lockstep` command, a
# CMake package and a pkg-config file under the prefix:
#
#   find_package(lockstep CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE lockstep::lockstep)
#
#   g++ -std=c++20 app.cc $(pkg-config --cflags --libs lockstep)
#
# The libraries are static, so a program links their dependencies too: the
# CMake package finds them with find_dependency (lockstepConfig.cmake.in) and
# the pkg-config file lists them. tests/install/ builds an example against
# an installed tree both ways.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(lockstep_layers GLOBAL PROPERTY LOCKSTEP_LAYERS)
set(lockstep_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)

install(TARGETS ${lockstep_layers} lockstep EXPORT lockstepTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS lockstep_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The CUDA adapter where it was built: a module the library finds in the
# install's library folder (src/tensor/gpu_kernels.cc).
if(TARGET lockstep_cuda)
  install(TARGETS lockstep_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY include/lockstep DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${lockstep_cmake_dir})

configure_package_config_file(cmake/lockstepConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/lockstepConfig.cmake
                              INSTALL_DESTINATION ${lockstep_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake
              ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
        DESTINATION ${lockstep_cmake_dir})

# lockstep.pc: relocatable (the prefix is found from the file's own place,
# so `--prefix` at install time needs no reconfiguring). Libraries in link
# order: each layer before the layers it uses, then the third-party ones.
set(pc_libs "")
foreach(layer estimator train distribute optim comm nn io data autodiff tensor core)
  string(APPEND pc_libs " -llockstep_${layer}")
endforeach()
get_target_property(gloo_location gloo IMPORTED_LOCATION_RELWITHDEBINFO)
if(NOT gloo_location)
  get_target_property(gloo_location gloo LOCATION)
endif()
get_filename_component(gloo_dir "${gloo_location}" DIRECTORY)
string(APPEND pc_libs " -ldnnl -L${gloo_dir} -lgloo -lfarmhash -fopenmp -pthread")
file(RELATIVE_PATH pc_to_prefix "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
configure_file(cmake/lockstep.pc.in ${PROJECT_BINARY_DIR}/lockstep.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/lockstep.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
