"""A deterministic stand-in for a chat model that writes back-translation questions.

It reads the prompt the way a model would (the document between <document> tags, how many
MATCH and GAP questions are asked for) and answers from the document's own sentences, so a
generation run over a real corpus produces questions that retrieval can actually answer.
Served through tests/openai_stub.py, it exercises the real `openai` client end to end.
"""

import re

_WORD = re.compile(r"[A-Za-zÀ-ÿ0-9][A-Za-zÀ-ÿ0-9'’-]*")
_STOP = set("the a an and or of to in on for with by at is are be was were this that it as from your you "
            "we our their they can must will should may not no any all each per if when than then into".split())


def _content_words(sentence: str) -> list[str]:
    return [w for w in _WORD.findall(sentence) if w.lower() not in _STOP and len(w) > 2]


def backtranslation_chat(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    if "<document>" in prompt:
        text = prompt.rsplit("<document>", 1)[1].split("</document>", 1)[0]
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if len(_content_words(s)) >= 4]
        wanted = [(label, int(n)) for n, label in re.findall(r"- (\d+) (MATCH|GAP) question", prompt)]
        lines, i = ["Here are the questions:"], 0  # a preamble the parser must ignore
        for label, n in wanted:
            for _ in range(n):
                if not sentences:
                    break
                words = _content_words(sentences[i % len(sentences)])
                i += 1
                if label == "MATCH":
                    lines.append(f"MATCH: What does the policy say about {' '.join(words[:6])}?")
                else:
                    lines.append(f"GAP: How do I deal with {' '.join(w.lower() for w in words[-4:])}?")
        return "\n".join(lines)
    n = int(re.search(r"Write (\d+) questions", prompt).group(1))
    batch = int(re.search(r"This is batch (\d+)", prompt).group(1))
    topics = ["pet insurance", "the company choir", "space tourism", "the sailing club", "pottery classes",
              "museum passes", "the chess league", "beekeeping", "a tandem bicycle", "gym lockers"]
    return "\n".join(f"QUESTION: Is there a benefit for {topics[j % len(topics)]} in year {2030 + 10 * batch + j}?"
                     for j in range(n))
