# End-to-end CLI test: `megakernel generate` on the golden models must print the greedy ids transformers
# produced; also EOS, seeds, error exits, and (when ../shared has the Llama 3 tokenizer) text and chat.
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_generate_e2e
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/cli_e2e.py $<TARGET_FILE:megakernel> ${PROJECT_SOURCE_DIR}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli_generate_e2e PROPERTIES TIMEOUT 300)
endif()
