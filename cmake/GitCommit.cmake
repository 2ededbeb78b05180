# Run at every build (cmake -P): writes the commit the sources are at to OUT, a header that
# defines ARCOLL_GIT_COMMIT, and touches it only when the commit changed, so that what includes
# it is compiled again after a commit and not otherwise. "-dirty" marks changes not committed;
# "unknown" outside a git checkout.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET RESULT_VARIABLE result)
if(NOT result EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no
                  WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE changes ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
string(CONCAT text "// Generated at build time (cmake/GitCommit.cmake): the commit of this build.\n"
       "#pragma once\n#define ARCOLL_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
