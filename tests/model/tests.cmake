# CLI checks of `megakernel inspect` on a golden model folder (tests/golden, made by transformers).
if(EXISTS ${PROJECT_SOURCE_DIR}/tests/golden/llama3_tied_bf16/config.json)
  add_test(NAME model_inspect_json
           COMMAND megakernel inspect --model ${PROJECT_SOURCE_DIR}/tests/golden/llama3_tied_bf16 --json)
  set_tests_properties(model_inspect_json PROPERTIES
    PASS_REGULAR_EXPRESSION "\"family\": \"llama\".*\"tie_word_embeddings\": true")
  add_test(NAME model_inspect_text
           COMMAND megakernel inspect --model ${PROJECT_SOURCE_DIR}/tests/golden/qwen2_bias_bf16)
  set_tests_properties(model_inspect_text PROPERTIES
    PASS_REGULAR_EXPRESSION "family +qwen2 \\(Qwen2ForCausalLM\\).*qkv bias / qk norm +yes / no")
endif()
add_test(NAME model_inspect_missing_folder
         COMMAND megakernel inspect --model ${PROJECT_SOURCE_DIR}/tests/model/no-such-model)
# The message, printed by the error path (a crash would not print it).
set_tests_properties(model_inspect_missing_folder PROPERTIES
  PASS_REGULAR_EXPRESSION "inspect: error: .*no-such-model: model folder does not exist")
