# Helpers shared by every CMakeLists in the tree: one way to add a layer
# library, a test binary, a benchmark or an example, so flags stay uniform.

# Warnings are errors on our own code only (never on third-party headers).
function(lockstep_set_warnings target)
  # -Wmissing-field-initializers stays on: options structs are filled partly
  # with designated initializers, so every field of a public struct has a
  # default member initializer (tests/install/option_fields.py checks).
  # GCC 12 reports -Wrestrict on std::string concatenation at -O3 (GCC bug
  # 105651), a false positive inside libstdc++.
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -Wno-unknown-pragmas
                                           $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
endfunction()

# lockstep_add_layer(NAME SOURCES ... DEPS ...): builds lockstep_NAME with the
# alias lockstep::NAME and public headers from include/.
function(lockstep_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(lockstep_${name} ${ARG_SOURCES})
  add_library(lockstep::${name} ALIAS lockstep_${name})
  # Installed as lockstep::${name} too (cmake/lockstepConfig.cmake.in).
  set_target_properties(lockstep_${name} PROPERTIES EXPORT_NAME ${name})
  # Each layer sees its own private headers only ("tensor/ops/loops.h" from
  # tensor's sources, never from optim's): its private include root is a
  # folder of the build tree holding one link, ${name} -> src/${name}
  # (scripts/check_layers.py checks the includes of public headers).
  set(private_root ${PROJECT_BINARY_DIR}/private_include/${name})
  file(MAKE_DIRECTORY ${private_root})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${name} ${private_root}/${name} SYMBOLIC)
  target_include_directories(lockstep_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${private_root})
  set_property(GLOBAL APPEND PROPERTY LOCKSTEP_LAYERS lockstep_${name})
  target_link_libraries(lockstep_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  lockstep_set_warnings(lockstep_${name})
  # sqrt/exp never set errno in our kernels, so loops calling them vectorise.
  target_compile_options(lockstep_${name} PRIVATE -fno-math-errno)
endfunction()

# lockstep_add_test(NAME SOURCES ... DEPS ... [LABELS ...]): one GoogleTest
# binary, registered with CTest test by test so failures are named.
function(lockstep_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  lockstep_set_warnings(${name})
  include(GoogleTest)
  # A GTEST_SKIP exits 0: without the expression CTest would count it passed.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}"
                       SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()

function(lockstep_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  lockstep_set_warnings(${name})
endfunction()
