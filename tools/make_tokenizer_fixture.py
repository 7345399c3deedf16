#!/usr/bin/env python3
"""tools/make_tokenizer_fixture.py: the WordPiece tokenizer's reference, for tests/lua/test_wordpiece.lua.

Writes tests/data/wordpiece_vocab.txt (a vocab trained with the `tokenizers` WordPiece trainer on
WordNet glosses: Debian's wordnet-base, /usr/share/wordnet, plus a few lines of other scripts so
that some accented, Greek, Cyrillic and CJK characters are in it and others are not) and
tests/data/wordpiece_fixture.json: about 200 varied texts (accents, CJK, emoji, control
characters, punctuation, long words, mixed case, special tokens) with Hugging Face's token ids
under three settings (lower-casing with accent stripping, cased, lower-casing keeping accents),
pair encodings with truncation and padding, and decodes.

Needs `transformers` and `tokenizers` (PyPI), e.g.:
    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers transformers
    /tmp/tokvenv/bin/python tools/make_tokenizer_fixture.py
Deterministic: the same packages write the same files.
"""
import json
import os
import random

import tokenizers
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import BertTokenizer  # in transformers 5 the tokenizers-backed (fast) one

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
VOCAB = os.path.join(DATA, "wordpiece_vocab.txt")
FIXTURE = os.path.join(DATA, "wordpiece_fixture.json")
WORDNET = "/usr/share/wordnet"


def glosses(limit):
    out = []
    for part in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(WORDNET, "data." + part), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "| " not in line:
                    continue  # the licence header
                out.append(line.split("| ", 1)[1].strip())
                if len(out) >= limit * (1 + ("noun", "verb", "adj", "adv").index(part)) // 4:
                    break
    return out


EXTRA = [
    "Café crème, naïve façade, résumé, São Paulo, Zürich, Ångström, El Niño.",
    "Καλημέρα κόσμε. Привет, мир! Добрый день.",
    "東京は日本の首都です。北京是中国的首都。",
    "한국어 문장입니다.",
]

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_vocab(lines):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=3000, special_tokens=SPECIAL, limit_alphabet=400,
                                        show_progress=False)
    tok.train_from_iterator(lines, trainer)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    with open(VOCAB, "w", encoding="utf-8") as f:
        for t, _ in vocab:
            f.write(t + "\n")


def texts(gl):
    rnd = random.Random(20261202)
    hand = [
        "", " ", "\t\n\r ", "Hello, world!", "HELLO World hello", "don't stop-believing...",
        "A.B.C. e.g. i.e. U.S.A.", "(parenthesis) [brackets] {braces} <angle>", "#hash $dollar %percent &amp;",
        "a\u0000b\u0001c\u0007d", "tab\there\nnewline\r\ncarriage", "zero\u200bwidth\u200dspace\ufeffbom",
        "replacement\ufffdchar", "soft\u00adhyphen", "non\u00a0breaking\u2003em\u3000ideographic space",
        "vertical\u000btab\u000cform\u0085nel", "line\u2028sep\u2029para",
        "Café crème naïve façade", "CAFÉ CRÈME NAÏVE", "résumé Résumé RÉSUMÉ", "Zürich Ångström Øresund",
        "El Niño jalapeño", "e\u0301 (combining acute) vs \u00e9", "\u0130stanbul İZMİR ıi", "straße STRASSE",
        "ǅ ǈ ǋ titlecase digraphs", "ﬁ ﬂ ligatures", "Ⅻ roman numeral ①②③ circled",
        "Καλημέρα κόσμε ΆΈΉ", "ΣΊΣΥΦΟΣ σίσυφος", "Привет, мир! ЁЖИК ёжик", "Добрый день",
        "東京は日本の首都です。", "北京是中国的首都", "中文字符和English混合", "𠀀𠀁 extension B ideographs",
        "ひらがな カタカナ ｶﾀｶﾅ", "한국어 문장입니다", "العربية نص", "עברית טקסט", "हिन्दी पाठ", "ไทย ภาษา",
        "emoji 😀😃 👍🏽 👨‍👩‍👧 🇩🇪 ❤️", "math ∑∫√∞ ≤≥ ±×÷", "currency €£¥₹ $5.00", "quotes “double” ‘single’ «guillemets» „low“",
        "dashes – — ‒ ‐ ‑ hyphen-minus", "ellipsis… bullet • middle·dot", "¿Qué? ¡Hola! ¡¡", "§ ¶ † ‡ © ® ™",
        "under_score snake_case_name", "email me@example.com http://x.org/a?b=c&d=e", "1,234.56 3.14159 10^6 2+2=4",
        "C++ C# .NET node.js", "@user #tag", "~tilde `backtick` ^caret |pipe| \\backslash/",
        "a" * 99, "b" * 100, "c" * 101, "antidisestablishmentarianism" * 4,
        "supercalifragilisticexpialidocious", "unaffordable unbelievably reconsideration",
        "Mixed CaSe WoRdS iN tHe SeNtEnCe", "ALLCAPS SENTENCE WITH WORDS", "x y z q w",
        "[CLS] already [SEP] there", "the [MASK] sat on the mat", "[mask] lower-case is not special", "[UNK][PAD]",
        "[MASK]ed [SEP]arated", "[[MASK]]", "[ MASK ]", "token[MASK]token",
        "\u0000\u0000", "\ufffd", "  leading and trailing   ", "multiple     spaces\t\t\ttabs",
        "zero-width\u200cnon-joiner", "private\ue000use", "noncharacter\ufdd0x", "unassigned\u0378x",
        "Ǆemal ǆ", "ꞵ latin extended", "ａｂｃ full-width ＡＢＣ１２３", "ｍｉｘｅｄ ｆｕｌｌ width！",
        "¹²³ superscripts ₁₂₃", "Ångström vs A\u030angstrom", "ḱṷṓn", "Việt Nam tiếng Việt",
        "ǰ ẖ ẘ ẙ (no precomposed upper)", "Ω ohm Ω omega", "K kelvin K", "ﬀ ﬃ ﬄ",
    ]
    out = list(hand)
    picks = rnd.sample(gl, 70)
    out += picks
    # Glosses with case changes, punctuation and foreign words mixed in.
    pieces = ["Café", "ÉCOLE", "東京", "😀", "naïve", "…", "—", "straße", "Ελλάδα", "Москва", "[MASK]", "x" * 50,
              "don't", "U.S.", "\u00a0", "\t", "ﬁne", "İ"]
    for _ in range(60):
        words = rnd.choice(gl).split()
        for _ in range(rnd.randint(1, 4)):
            words.insert(rnd.randint(0, len(words)), rnd.choice(pieces))
        s = " ".join(words)
        if rnd.random() < 0.4:
            s = s.upper()
        elif rnd.random() < 0.3:
            s = s.title()
        out.append(s)
    return out


def main():
    gl = glosses(6000)
    train_vocab(gl + EXTRA)
    settings = {
        "lower": dict(do_lower_case=True),
        "cased": dict(do_lower_case=False),
        "lower_accents": dict(do_lower_case=True, strip_accents=False),
    }
    toks = {k: BertTokenizer(vocab=VOCAB, **v) for k, v in settings.items()}
    cases = []
    for t in texts(gl):
        c = {"text": t}
        for k, tk in toks.items():
            ids = tk(t, add_special_tokens=False)["input_ids"]
            c[k] = ids
        c["tokens"] = toks["lower"].tokenize(t)
        cases.append(c)

    rnd = random.Random(7)
    encode = []
    tl = toks["lower"]
    for i in range(40):
        a, b = rnd.choice(cases)["text"], rnd.choice(cases)["text"]
        pair = i % 4 != 3
        max_length = rnd.choice([5, 8, 12, 16, 24, 32, 64])
        trunc = i % 5 != 4
        pad = i % 3 != 2
        kw = dict(max_length=max_length, truncation="longest_first" if trunc else False,
                  padding="max_length" if pad else False)
        enc = tl(a, b, **kw) if pair else tl(a, **kw)
        encode.append({"a": a, "b": b if pair else None, "max_length": max_length, "truncation": trunc,
                       "padding": pad, "input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
                       "attention_mask": enc["attention_mask"]})
    for t in ["Hello, world!", "the [MASK] sat on the mat", "东京 Café"]:
        enc = tl(t)
        encode.append({"a": t, "b": None, "max_length": None, "truncation": False, "padding": False,
                       "input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
                       "attention_mask": enc["attention_mask"]})

    decode = []
    for c in cases[::7]:
        ids = tl(c["text"])["input_ids"]
        for skip in (False, True):
            decode.append({"ids": ids, "skip_special": skip,
                           "text": tl.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)})

    # Texts go as the hex of their UTF-8: the runtime's JSON reader (cJSON) takes no \u0000.
    hx = lambda t: None if t is None else t.encode("utf-8").hex()
    for c in cases:
        c["text"] = hx(c["text"])
    for e in encode:
        e["a"], e["b"] = hx(e["a"]), hx(e["b"])
    for d in decode:
        d["text"] = hx(d["text"])
    with open(FIXTURE, "w", encoding="utf-8") as f:
        json.dump({"made_by": "tools/make_tokenizer_fixture.py", "transformers": transformers.__version__,
                   "tokenizers": tokenizers.__version__, "texts": "hex of UTF-8", "vocab": "wordpiece_vocab.txt",
                   "settings": {k: {"lower": v["do_lower_case"], "strip_accents": v.get("strip_accents")}
                                for k, v in settings.items()},
                   "cases": cases, "encode": encode, "decode": decode}, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} texts, {len(encode)} encodings, {len(decode)} decodes; vocab {len(tl)} tokens")


if __name__ == "__main__":
    main()
