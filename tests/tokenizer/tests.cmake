# Differential test of the tokenizer against the Python package `tokenizers` (tests/tokenizer/
# differential_test.py): the real Llama 3 / Qwen3 files from ../shared/data/tokenizers when present
# (MK_TOKENIZER_DATA overrides), plus tokenizers it trains itself.
if(Python3_Interpreter_FOUND)
  add_test(NAME tokenizer_differential
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/differential_test.py $<TARGET_FILE:megakernel>
                   --random 1000)
  set_tests_properties(tokenizer_differential PROPERTIES TIMEOUT 600 LABELS tokenizer)
endif()
