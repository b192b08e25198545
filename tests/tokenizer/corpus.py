"""Text corpus for the tokenizer differential test: fixed cases covering what byte-level BPE tokenizers
get wrong (scripts, emoji sequences, numbers, whitespace runs, special tokens, combining marks,
contractions, invalid UTF-8) and random strings from a fixed seed. Every case is raw bytes."""
import random

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|reserved_special_token_3|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
            "<tool_call>", "<|fim_prefix|>", "<|vision_pad|>"]

FIXED = [
    "", " ", "  ", "\n", "\n\n\n", "\t", " \t \n ", "\r\n", "\r\n\r\n  \r\n", "a", "A", "hello", " hello", "hello ",
    "Hello, world! How are you doing today?",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX.",
    "I'm sure you're right, we'll see; they've said it'd work. I'M SURE YOU'RE RIGHT. 's 'S 'ſ 'K 'K",
    "don't DON'T Don'T can't won't shouldn't y'all o'clock rock'n'roll",
    "def foo(x):\n    return x ** 2  # square\n\n\nclass Bar:\n\tpass\n",
    "int main(int argc, char** argv) {\n  for (int i = 0; i < argc; ++i) printf(\"%s\\n\", argv[i]);\n}\n",
    "if (a && b || !c) { x += y >>= 2; } // comment /* block */ <div class=\"x\">&amp;</div>",
    "    indented with four spaces\n        and eight\n\t\ttabs\n   \n",
    "0 1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890 3.14159 -42 +7 1e10 0x1F 1,000,000",
    "1111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111",
    "٠١٢٣٤٥٦٧٨٩ ०१२३४५६७८९ ¹²³ ½ ⅓ Ⅻ ① ⑩ 𝟙𝟚𝟛",
    "中文文本测试：你好，世界！这是一个测试。", "日本語のテキスト、カタカナとひらがな。", "한국어 텍스트 안녕하세요",
    "Привет, мир! Ελληνικά. עברית. العربية. हिन्दी भाषा. ภาษาไทย. ქართული.",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇫🇷 ❤️ ☺️ 🧑🏿‍🚀 👩🏻‍❤️‍💋‍👨🏼 #️⃣ 1️⃣",
    "café cafe\u0301 e\u0301\u0301 A\u030a Å Å ñ n\u0303 Ω Ω ﬁ ① Ｈｅｌｌｏ ｶﾀｶﾅ \u1100\u1161\u11a8 한",
    "a\u0300\u0301\u0302\u0303 \u0344 \u0958 \u2126 \u212b \u1e9b\u0323 \uac00\u11a8 \u0f73",
    "<|begin_of_text|>Hello<|eot_id|>", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_start|>x<|im_end|><|im_end|>", "text<|endoftext|>more text", "<think>\nreasoning\n</think>\n\nanswer",
    "<|im_start", "<|im_end|", "|>", "<<|im_end|>>", "< |im_end| >", " <|eot_id|> ", "<|reserved_special_token_250|>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<|fim_prefix|>code<|fim_suffix|><|fim_middle|>",
    "mixed\u00a0nbsp\u2009thin\u3000ideographic\u2028line\u2029para\u0085nel\u180emvs\u200bzwsp\u000bvt\u000cff",
    "   leading and trailing   ", "a  b   c    d     e", "\n \n  \n   \n", " \t\n\r\u000b\u000c",
    "https://example.com/path?query=1&b=2#frag user@example.com C:\\Users\\x\\file.txt",
    "$$ \\frac{a}{b} = \\sum_{i=0}^{n} x_i^2 $$ ∀x∈ℝ: x²≥0 → ∞ ≠ ≤ ≥ ±",
    "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@^^^~~~```'''\"\"\"",
    "ALLCAPS lowercase MiXeD CamelCaseWord snake_case_word kebab-case-word",
    "\u0000nul\u0001soh\u001fus\u007fdel", "\ufeffbom", "\U0010fffd\U000e0001\U000f0000 private use \ue000",
    "x" * 300, " " * 300, "\n" * 50 + "end", "ab" * 200, "😀" * 40,
]

# Invalid UTF-8: lone continuation bytes, truncated sequences, overlongs, surrogates, out-of-range.
INVALID = [b"\x80", b"abc\xffdef", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98", b"\xf0\x9f\x98 x",
           b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",
           b"\xfe\xff", b"hello \xe4\xbd wor\xa0ld", b"<|im_start|>\xff<|im_end|>", b"\x80\x80\x80\x80",
           b"caf\xc3\xa9\xcc", b"\xf0\x9f\x91\xa8\xe2\x80\x8d"]

# Pools the random generator draws characters from.
POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "   \t\n\r",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "'sStTmMdDlLrReEvV",
    "\u00a0\u2000\u2009\u200a\u3000\u2028\u2029\u0085\u180e\u200b\u000b\u000c\u1680\u202f\u205f",
    "中文字测试你好世界日本語カタカナひらがな한국어텍스트", "αβγδεζηθλμπσωΑΒΓΔΩЖЗИЙКЛМНабвгдеё",
    "\u0300\u0301\u0302\u0303\u0308\u0323\u0327\u0338\u093c\u094d\u05b4\u0651\u3099\u309a",
    "eaouinAEOUINcCsSzZ\u1100\u1161\u11a8\u0915\u0928",
    "😀😃👍🏽🏻🏿👨👩👧👦🚀🌈🇺🇸🇫🇷❤☺#1\u200d\ufe0f\u20e3",
    "٠١٢٣٤٥٦٧٨٩०१२३४५६७८९¹²³½⅓Ⅻ①𝟙",
]


def random_char(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.85:
        return rng.choice(rng.choice(POOLS))
    if roll < 0.95:  # any Basic Multilingual Plane character (surrogates excluded)
        cp = rng.randrange(0x20, 0xFFFE)
        return chr(cp) if not 0xD800 <= cp < 0xE000 else "?"
    cp = rng.randrange(0x10000, 0x110000)
    return chr(cp)


def random_text(rng: random.Random, specials) -> str:
    n = rng.choice([1, 2, 3, 5, 8, 13, 30, 60, 120])
    parts = []
    for _ in range(n):
        if specials and rng.random() < 0.03:
            parts.append(rng.choice(specials))
        elif rng.random() < 0.3:
            parts.append(rng.choice(rng.choice(POOLS)) * rng.randrange(1, 6))
        else:
            parts.append(random_char(rng))
    return "".join(parts)


def cases(n_random: int, seed: int = 1234):
    """Raw byte strings: the fixed cases, the invalid ones, then n_random random texts."""
    out = [s.encode("utf-8", "surrogatepass") for s in FIXED]
    out += INVALID
    rng = random.Random(seed)
    for _ in range(n_random):
        out.append(random_text(rng, SPECIALS).encode("utf-8"))
    # Random bytes, mostly valid UTF-8 with some damage.
    for _ in range(max(1, n_random // 20)):
        b = bytearray(random_text(rng, SPECIALS).encode("utf-8"))
        for _ in range(rng.randrange(1, 4)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))
    return out
