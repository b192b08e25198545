# Chat templates: the differential test against Python's jinja2 (tools/chat_template_cases.py drives
# chat_template_render, which renders with our interpreter). The committed golden file is checked by
# test_chat (tests/chat/test_chat_golden.cpp) without Python.
add_executable(chat_template_render ${CMAKE_CURRENT_LIST_DIR}/driver/chat_template_render.cpp)
target_link_libraries(chat_template_render PRIVATE mk_tokenizer)
if(Python3_Interpreter_FOUND)
  add_test(NAME chat_template_vs_jinja2
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/chat_template_cases.py check
                   --renderer $<TARGET_FILE:chat_template_render> --n 400 --seed 7
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(chat_template_vs_jinja2 PROPERTIES TIMEOUT 120)
endif()
if(Python3_Interpreter_FOUND)
  # Mutated templates: no crash, and the same result as jinja2 (or an error naming an unsupported construct).
  add_test(NAME chat_template_fuzz_vs_jinja2
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/chat_template_fuzz.py
                   --renderer $<TARGET_FILE:chat_template_render> --n 300 --seed 1
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(chat_template_fuzz_vs_jinja2 PROPERTIES TIMEOUT 120)
endif()
