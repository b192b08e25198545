"""Small tokenizer.json files trained with `tokenizers` itself, built to exercise what the real Llama 3 and
Qwen3 files do not: added tokens with lstrip / rstrip / single_word / normalized, non-special added tokens,
other normalizers and pre-tokenizer shapes (GPT-2 ByteLevel regex, prefix space, split behaviors)."""
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")

ADDED = [
    AddedToken("<|special|>", special=True, normalized=False),
    AddedToken("<|eos|>", special=True, normalized=False),
    AddedToken("[LSTRIP]", lstrip=True, special=True, normalized=False),
    AddedToken("[RSTRIP]", rstrip=True, special=False, normalized=False),
    AddedToken("[BOTH]", lstrip=True, rstrip=True, special=False, normalized=False),
    AddedToken("word", single_word=True, special=False, normalized=False),
    AddedToken("café", special=False, normalized=True),
    AddedToken("Å", special=False, normalized=True),
    AddedToken("<tag>", special=False, normalized=False),
    AddedToken("<tag>long", special=False, normalized=False),
    AddedToken("中文", single_word=True, special=False, normalized=True),
]


def _train(tok: Tokenizer, texts, vocab_size: int) -> Tokenizer:
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(ADDED)
    return tok


def build(out_dir: str, texts):
    """Writes <out_dir>/<name>/tokenizer.json for each synthetic tokenizer; returns {name: folder}."""
    specs = {}
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    specs["syn_llama"] = _train(t, texts, 1500)

    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    specs["syn_qwen"] = _train(t, texts, 1200)

    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.NFC()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[.,;]+"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\n"), behavior="merged_with_next"),
        pre_tokenizers.Split("--", behavior="removed"),
        pre_tokenizers.Split(Regex(r"[a-z]"), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    t.decoder = decoders.ByteLevel()
    specs["syn_gpt2"] = _train(t, texts, 800)

    folders = {}
    for name, tok in specs.items():
        folder = os.path.join(out_dir, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"))
        folders[name] = folder
    return folders
