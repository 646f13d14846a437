# Warning flags for specdec's own compiled targets (never forced on consumers).
function(specdec_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-psabi>)
endfunction()
