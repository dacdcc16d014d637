#!/usr/bin/env python3
"""Validate the bundled demo data (corpus.jsonl + questions.jsonl).

Standard library only; run by tests/unit/demo_data/test_demo_data.py, or by hand:

    python3 tests/demo_data_rules.py [DATA_DIR]

DATA_DIR defaults to eval_pipeline/demo_data. Exits 0 and
prints summary counts when every rule passes; otherwise prints each
violation (naming the file and line) and exits 1.

questions.jsonl normally has no header line. If its first line is a JSON
object without a "qid" key, it is treated as a header stamped on later and
skipped.
"""

import datetime
import json
import re
import sys
from collections import Counter
from pathlib import Path

# ---- rules --------------------------------------------------------------
MIN_DOCS, MAX_DOCS = 34, 38
LONG_WORDS = 900            # a "long" document has at least this many words
MAX_WORDS = 1500            # no document may exceed this
MIN_WORDS = 120             # no document may be shorter than this
MIN_LONG_DOCS = 3
MIN_BODY_ONLY_DOCS = 6
MIN_QUESTIONS = 230
MIN_ABSTENTION_SHARE = 0.18
MIN_TWO_GOLD = 10
MIN_Q_BODY_ONLY_DOC = 5
MIN_Q_LONG_DOC = 8
MIN_Q_OTHER_DOC = 3
MIN_BODY_ONLY_QUESTIONS = 35
MATCH_SHARE_RANGE = (0.40, 0.60)   # among answerable questions ("roughly half")

DOC_FIELDS = ("doc_id", "title", "description", "filename", "content")
Q_FIELDS = ("qid", "question", "gold", "form", "hard_class", "gist")
FORMS = {"MATCH", "GAP"}
HARD_CLASSES = {None, "body-only", "deep-chunk", "multi-gold", "abstention"}
KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")


def norm_phrase(s):
    """Lowercase; '-', '_' and whitespace runs all become one space."""
    return re.sub(r"[\s_\-]+", " ", s.lower()).strip()


def norm_dupe(s):
    """Lowercase, strip punctuation, collapse whitespace (duplicate check)."""
    s = re.sub(r"[^\w\s]", " ", s.lower())
    return re.sub(r"\s+", " ", s).strip()


def contains_phrase(text, phrase):
    """Whole-word match of an already-normalised phrase inside text.

    Uses look-arounds, which equal \\b at word-character edges and also
    behave sensibly for phrases that begin or end with punctuation.
    """
    if not phrase:
        return False
    pat = r"(?<!\w)" + re.escape(phrase) + r"(?!\w)"
    return re.search(pat, norm_phrase(text)) is not None


def filename_stem(filename):
    last = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return last.rsplit(".", 1)[0] if "." in last else last


class Report:
    def __init__(self):
        self.errors = []

    def err(self, where, msg):
        self.errors.append(f"{where}: {msg}")


def load_jsonl(path, rep):
    rows = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        rep.err(str(path), "file not found")
        return rows
    except UnicodeDecodeError as e:
        rep.err(str(path), f"not valid UTF-8 ({e})")
        return rows
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            rep.err(f"{path.name}:{i}", "blank line")
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            rep.err(f"{path.name}:{i}", f"invalid JSON ({e})")
            continue
        if not isinstance(obj, dict):
            rep.err(f"{path.name}:{i}", "line is not a JSON object")
            continue
        rows.append((i, obj))
    return rows


def nonempty_str(v):
    return isinstance(v, str) and v.strip() != ""


def check_corpus(rows, rep):
    docs = {}
    for ln, d in rows:
        where = f"corpus.jsonl:{ln}"
        for f in DOC_FIELDS:
            if not nonempty_str(d.get(f)):
                rep.err(where, f"field {f!r} missing or not a non-empty string")
        meta = d.get("metadata")
        if not isinstance(meta, dict):
            rep.err(where, "field 'metadata' missing or not an object")
            meta = {}
        if not nonempty_str(meta.get("team")):
            rep.err(where, "metadata.team missing or empty")
        upd = meta.get("updated")
        try:
            if not (isinstance(upd, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", upd)):
                raise ValueError
            datetime.date.fromisoformat(upd)
        except ValueError:
            rep.err(where, f"metadata.updated must be a YYYY-MM-DD date, got {upd!r}")
        if "body_only" in meta and not isinstance(meta["body_only"], bool):
            rep.err(where, "metadata.body_only must be true/false when present")
        did = d.get("doc_id")
        if not isinstance(did, str):
            continue
        if not KEBAB.match(did):
            rep.err(where, f"doc_id {did!r} is not lowercase kebab-case")
        if did in docs:
            rep.err(where, f"duplicate doc_id {did!r} (first on line {docs[did]['_line']})")
            continue
        fn = d.get("filename", "")
        if isinstance(fn, str) and ("/" not in fn or fn.startswith("/") or not fn.endswith(".md")):
            rep.err(where, f"filename {fn!r} should be a relative path with a folder, ending .md")
        content = d.get("content") if isinstance(d.get("content"), str) else ""
        if HTML_TAG.search(content):
            rep.err(where, f"content looks like it contains HTML: {HTML_TAG.search(content).group(0)!r}")
        words = len(content.split())
        if words < MIN_WORDS or words > MAX_WORDS:
            rep.err(where, f"{did}: content has {words} words (allowed {MIN_WORDS}-{MAX_WORDS})")
        docs[did] = {
            "_line": ln,
            "title": d.get("title", ""),
            "filename": fn if isinstance(fn, str) else "",
            "words": words,
            "body_only": bool(meta.get("body_only", False)),
        }
    n = len(docs)
    if not MIN_DOCS <= n <= MAX_DOCS:
        rep.err("corpus.jsonl", f"{n} documents; need {MIN_DOCS}-{MAX_DOCS}")
    n_long = sum(1 for v in docs.values() if v["words"] >= LONG_WORDS)
    if n_long < MIN_LONG_DOCS:
        rep.err("corpus.jsonl", f"{n_long} documents with >= {LONG_WORDS} words; need >= {MIN_LONG_DOCS}")
    n_body = sum(1 for v in docs.values() if v["body_only"])
    if n_body < MIN_BODY_ONLY_DOCS:
        rep.err("corpus.jsonl", f"{n_body} body_only documents; need >= {MIN_BODY_ONLY_DOCS}")
    return docs


def check_questions(rows, docs, rep):
    # optional header stamped later
    if rows and "qid" not in rows[0][1]:
        print(f"note: questions.jsonl line {rows[0][0]} has no 'qid'; treated as header and skipped")
        rows = rows[1:]

    seen_norm = {}
    per_doc = Counter()
    per_doc_deep = Counter()
    stats = Counter()
    seen_qids = {}
    for idx, (ln, q) in enumerate(rows, start=1):
        where = f"questions.jsonl:{ln}"
        missing = [f for f in Q_FIELDS if f not in q]
        if missing:
            rep.err(where, f"missing field(s) {missing}")
            continue
        qid, text, gold = q["qid"], q["question"], q["gold"]
        form, hc, gist = q["form"], q["hard_class"], q["gist"]

        # qid: unique + sequential q0001, q0002, ...
        if not (isinstance(qid, str) and re.fullmatch(r"q\d{4,}", qid)):
            rep.err(where, f"qid {qid!r} is not of the form q0001")
        elif qid in seen_qids:
            rep.err(where, f"duplicate qid {qid} (first on line {seen_qids[qid]})")
        elif int(qid[1:]) != idx:
            rep.err(where, f"qid {qid} out of sequence (question #{idx} should be q{idx:04d})")
        if isinstance(qid, str):
            seen_qids.setdefault(qid, ln)
        if not nonempty_str(text):
            rep.err(where, "question must be a non-empty string")
            text = ""
        if not isinstance(gist, str):
            rep.err(where, "gist must be a string")
            gist = ""
        if form not in FORMS:
            rep.err(where, f"form {form!r} not in {sorted(FORMS)}")
        if hc not in HARD_CLASSES:
            rep.err(where, f"hard_class {hc!r} not one of {sorted(map(str, HARD_CLASSES))}")
        if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
            rep.err(where, "gold must be a list of doc_id strings")
            continue
        if len(set(gold)) != len(gold):
            rep.err(where, f"gold has duplicate ids {gold}")
        for g in gold:
            if g not in docs:
                rep.err(where, f"gold id {g!r} does not exist in corpus.jsonl")
        gold = [g for g in gold if g in docs]

        # hard_class consistency
        if not q["gold"]:
            stats["abstention"] += 1
            if hc != "abstention":
                rep.err(where, f"empty gold requires hard_class 'abstention', got {hc!r}")
            if gist != "":
                rep.err(where, "abstention questions must have an empty gist")
        else:
            stats["answerable"] += 1
            stats[f"form_{form}"] += 1
            if not gist.strip():
                rep.err(where, "answerable question needs a non-empty gist")
            if len(q["gold"]) > 2:
                rep.err(where, f"gold has {len(q['gold'])} ids; at most 2 allowed")
            if len(q["gold"]) == 2:
                stats["two_gold"] += 1
                if hc != "multi-gold":
                    rep.err(where, f"two-gold question must have hard_class 'multi-gold', got {hc!r}")
            elif len(gold) == 1:
                d = docs[gold[0]]
                is_long = d["words"] >= LONG_WORDS
                if d["body_only"]:
                    if hc != "body-only":
                        rep.err(where, f"gold {gold[0]} is body_only; hard_class must be 'body-only', got {hc!r}")
                elif is_long:
                    if hc not in (None, "deep-chunk"):
                        rep.err(where, f"gold {gold[0]} is a long doc; hard_class must be 'deep-chunk' or null, got {hc!r}")
                else:
                    if hc is not None:
                        rep.err(where, f"gold {gold[0]} is an ordinary doc; hard_class must be null, got {hc!r}")
            if hc == "abstention":
                rep.err(where, "hard_class 'abstention' requires empty gold")
            if hc == "multi-gold" and len(q["gold"]) != 2:
                rep.err(where, "hard_class 'multi-gold' requires exactly two gold ids")
            if hc == "body-only":
                stats["body_only_q"] += 1
            if hc == "deep-chunk":
                stats["deep_chunk_q"] += 1
        for g in gold:
            per_doc[g] += 1
            if hc == "deep-chunk":
                per_doc_deep[g] += 1

        # no gold title / filename stem inside the question
        for g in gold:
            for label, phrase in (("title", docs[g]["title"]),
                                  ("filename stem", filename_stem(docs[g]["filename"]))):
                p = norm_phrase(phrase)
                if contains_phrase(text, p):
                    rep.err(where, f"question contains the {label} of gold doc {g}: {p!r}")

        # near-duplicate questions
        key = norm_dupe(text)
        if key in seen_norm:
            rep.err(where, f"question duplicates line {seen_norm[key]} after normalisation")
        else:
            seen_norm[key] = ln

    total = len(rows)
    if total < MIN_QUESTIONS:
        rep.err("questions.jsonl", f"{total} questions; need >= {MIN_QUESTIONS}")
    share = stats["abstention"] / total if total else 0.0
    if share < MIN_ABSTENTION_SHARE:
        rep.err("questions.jsonl", f"abstention share {share:.3f} < {MIN_ABSTENTION_SHARE}")
    if stats["two_gold"] < MIN_TWO_GOLD:
        rep.err("questions.jsonl", f"{stats['two_gold']} two-gold questions; need >= {MIN_TWO_GOLD}")
    if stats["body_only_q"] < MIN_BODY_ONLY_QUESTIONS:
        rep.err("questions.jsonl", f"{stats['body_only_q']} body-only questions; need >= {MIN_BODY_ONLY_QUESTIONS}")
    ans = stats["answerable"]
    if ans:
        ms = stats["form_MATCH"] / ans
        lo, hi = MATCH_SHARE_RANGE
        if not lo <= ms <= hi:
            rep.err("questions.jsonl", f"MATCH share among answerable questions is {ms:.2f}; expected {lo}-{hi}")

    for did, d in docs.items():
        n = per_doc[did]
        if d["body_only"]:
            need, kind = MIN_Q_BODY_ONLY_DOC, "body_only"
        elif d["words"] >= LONG_WORDS:
            need, kind = MIN_Q_LONG_DOC, "long"
            if n and per_doc_deep[did] * 2 <= n:
                rep.err("questions.jsonl", f"long doc {did}: only {per_doc_deep[did]} of {n} questions are deep-chunk (need a majority)")
        else:
            need, kind = MIN_Q_OTHER_DOC, "ordinary"
        if n < need:
            rep.err("questions.jsonl", f"{kind} doc {did} has {n} questions; needs >= {need}")
    return total, stats, per_doc


DEMO_DATA = Path(__file__).resolve().parent.parent / "eval_pipeline" / "demo_data"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    base = Path(argv[0]) if argv else DEMO_DATA
    rep = Report()
    docs = check_corpus(load_jsonl(base / "corpus.jsonl", rep), rep)
    total, stats, per_doc = check_questions(load_jsonl(base / "questions.jsonl", rep), docs, rep)

    if rep.errors:
        print(f"FAILED: {len(rep.errors)} problem(s)")
        for e in rep.errors:
            print("  " + e)
        return 1

    n_long = [k for k, v in docs.items() if v["words"] >= LONG_WORDS]
    n_body = [k for k, v in docs.items() if v["body_only"]]
    ans = stats["answerable"]
    print("OK: demo data passes all checks")
    print(f"  documents:              {len(docs)}  (long >= {LONG_WORDS} words: {len(n_long)}, body_only: {len(n_body)})")
    print(f"  words per doc:          min {min(v['words'] for v in docs.values())}, "
          f"max {max(v['words'] for v in docs.values())}, total {sum(v['words'] for v in docs.values())}")
    print(f"  questions:              {total}")
    print(f"  answerable:             {ans}  (MATCH {stats['form_MATCH']}, GAP {stats['form_GAP']})")
    print(f"  abstention:             {stats['abstention']}  (share {stats['abstention'] / total:.3f})")
    print(f"  two-gold (multi-gold):  {stats['two_gold']}")
    print(f"  body-only questions:    {stats['body_only_q']}")
    print(f"  deep-chunk questions:   {stats['deep_chunk_q']}")
    print(f"  questions per doc:      min {min(per_doc[d] for d in docs)}, max {max(per_doc[d] for d in docs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
