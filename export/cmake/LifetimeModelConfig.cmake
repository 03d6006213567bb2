# CMake package config of an exported lifetime model (relocatable).
#   find_package(LifetimeModel REQUIRED)     # with CMAKE_PREFIX_PATH=<export dir>
#   target_link_libraries(app PRIVATE LifetimeModel::lifetime_model)
# Provides: LifetimeModel::lifetime_model (static, needs only libstdc++/libm/libc),
#           LifetimeModel_INCLUDE_DIR, LifetimeModel_LIBRARY, LifetimeModel_MODEL_CARD.
get_filename_component(_lifetime_model_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
include(CMakeFindDependencyMacro)
find_dependency(Threads)
set(LifetimeModel_INCLUDE_DIR "${_lifetime_model_prefix}/include")
set(LifetimeModel_LIBRARY "${_lifetime_model_prefix}/lib/liblifetime_model.a")
set(LifetimeModel_MODEL_CARD "${_lifetime_model_prefix}/share/lifetime_model/model_card.md")
if(NOT TARGET LifetimeModel::lifetime_model)
  add_library(LifetimeModel::lifetime_model STATIC IMPORTED)
  set_target_properties(LifetimeModel::lifetime_model PROPERTIES
    IMPORTED_LOCATION "${LifetimeModel_LIBRARY}"
    IMPORTED_LINK_INTERFACE_LANGUAGES CXX
    INTERFACE_INCLUDE_DIRECTORIES "${LifetimeModel_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;m")
endif()
set(LifetimeModel_FOUND TRUE)
