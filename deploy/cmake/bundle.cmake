# The worker's dependencies from a bundle made by deploy/make-gpu-bundle.sh, as the imported
# targets find_package would give: protobuf (the library the bundled messages were generated
# for), zlib, and the header-only Boost, nlohmann-json and CLI11 (headers only those the worker
# includes).
if(NOT SHOAL_WORKER_ONLY)
  message(FATAL_ERROR "SHOAL_BUNDLE builds the worker only: add -DSHOAL_WORKER_ONLY=ON")
endif()
if(NOT EXISTS ${SHOAL_BUNDLE}/gen/shoal/v1/shoal.pb.cc)
  message(FATAL_ERROR "${SHOAL_BUNDLE} is not a bundle: run deploy/make-gpu-bundle.sh")
endif()

function(shoal_bundled_library name file)
  add_library(${name} SHARED IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION ${SHOAL_BUNDLE}/lib/${file}
                                           INTERFACE_INCLUDE_DIRECTORIES ${SHOAL_BUNDLE}/include)
endfunction()

function(shoal_bundled_headers name)
  add_library(${name} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${SHOAL_BUNDLE}/include)
endfunction()

file(GLOB _protobuf ${SHOAL_BUNDLE}/lib/libprotobuf.so.*)
file(GLOB _zlib ${SHOAL_BUNDLE}/lib/libz.so.*)
get_filename_component(_protobuf ${_protobuf} NAME)
get_filename_component(_zlib ${_zlib} NAME)
shoal_bundled_library(protobuf::libprotobuf ${_protobuf})
shoal_bundled_library(ZLIB::ZLIB ${_zlib})
shoal_bundled_headers(Boost::headers)
shoal_bundled_headers(nlohmann_json::nlohmann_json)
shoal_bundled_headers(CLI11::CLI11)
